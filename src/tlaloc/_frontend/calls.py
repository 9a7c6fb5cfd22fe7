"""Resolving what a call in user code means.

* ``tlaloc.numpy`` functions and ``Value`` methods: called directly (they record nodes).
* NumPy functions (``np.tanh``, ``np.linalg.solve``): mapped by name onto
  ``tlaloc.numpy``; with only static arguments they simply run.
* user Python functions and nested ``def``s: their source is lowered too, inline.
* transformed functions (``tl.grad(f)``): their DXIR graph is inlined.
* a few builtins (``len``, ``range``, ``abs``, ``min``, ``max``, ``sum``, ``zip``,
  ``enumerate``, ...), with static or symbolic arguments.
Anything else that receives a symbolic array is refused by name.
"""
from __future__ import annotations

import builtins
import types

import numpy as np

from .. import numpy as tnp
from .._prims import misc as _misc
from .values import LocalFunction, SymbolicRange, is_symbolic


def _any_symbolic(args, kwargs) -> bool:
    from .. import _pytree
    leaves = _pytree.leaves((list(args), dict(kwargs)))
    return any(is_symbolic(x) for x in leaves)


def numpy_equivalent(fn):
    """The ``tlaloc.numpy`` (or ``tlaloc.scipy``) function for a NumPy or SciPy callable, or None."""
    if is_scipy_callable(fn):
        return scipy_equivalent(fn)
    name = getattr(fn, "__name__", None)
    if name is None:
        return None
    mod = getattr(fn, "__module__", None) or ""
    if isinstance(fn, np.ufunc) or mod == "numpy":
        return getattr(tnp, name, None)
    if mod == "numpy.linalg":
        return getattr(tnp.linalg, name, None)
    if mod == "numpy.fft":
        return getattr(tnp.fft, name, None)
    # another NumPy module's function of the same name is another function: np.polynomial.polynomial.polyval
    # takes (x, c) in increasing order, np.emath.sqrt is complex for negatives (regression: both were run
    # as np.polyval / np.sqrt, silently wrong); refused by name instead
    return None


def is_numpy_callable(fn) -> bool:
    """NumPy and SciPy callables: mapped by ``numpy_equivalent``, or run when every argument is static."""
    mod = getattr(fn, "__module__", None) or ""
    return isinstance(fn, np.ufunc) or mod.startswith("numpy") or is_scipy_callable(fn)


# -- SciPy: mapped by module and name onto tlaloc.scipy --------------------------------------------

_SCIPY_MODULES = ("special", "stats", "linalg", "signal", "spatial.distance")
_SCIPY_REFUSED = {
    "scipy.integrate.odeint": "write the solver loop in the function (e.g. a fixed-step RK4 `for` loop, which "
                              "tlaloc differentiates), or wrap odeint with tl.custom_vjp and an adjoint rule",
    "scipy.integrate.solve_ivp": "write the solver loop in the function (e.g. a fixed-step RK4 `for` loop), or "
                                 "wrap solve_ivp with tl.custom_vjp",
}
_scipy_table: dict | None = None


def _scipy_owner(fn):
    """``fn`` itself, or the object whose bound method it is (``norm`` for ``norm.logpdf``)."""
    owner = getattr(fn, "__self__", None)
    return owner if owner is not None and not isinstance(owner, types.ModuleType) else fn


def is_scipy_callable(fn) -> bool:
    target = _scipy_owner(fn)
    mod = getattr(target, "__module__", None) or getattr(type(target), "__module__", "") or ""
    if isinstance(fn, np.ufunc):          # scipy.special's ufuncs carry no module: find them by name
        special = __import__("sys").modules.get("scipy.special")
        return special is not None and getattr(special, fn.__name__, None) is fn and getattr(np, fn.__name__,
                                                                                             None) is not fn
    return mod.startswith("scipy.")


def _scipy_objects() -> dict:
    """``id(scipy object) -> (qualified name, tlaloc.scipy object)`` for every name tlaloc.scipy
    exports, found by module and name (``scipy.special.logsumexp`` -> ``tlaloc.scipy.special.logsumexp``)."""
    global _scipy_table
    if _scipy_table is None:
        import importlib
        from .. import scipy as tsp
        table = {}
        for sub in _SCIPY_MODULES:
            try:
                mod = importlib.import_module(f"scipy.{sub}")
            except ImportError:        # pragma: no cover - scipy absent: nothing to map
                continue
            ours = getattr(tsp, sub.split(".")[0])     # scipy.spatial.distance -> tlaloc.scipy.spatial
            for name in ours.__all__:
                theirs = getattr(mod, name, None)
                if theirs is not None:
                    table[id(theirs)] = (f"scipy.{sub}.{name}", getattr(ours, name), theirs)
        _scipy_table = table
    return _scipy_table


def scipy_equivalent(fn):
    """The ``tlaloc.scipy`` callable for a SciPy function, bound method of a SciPy distribution
    (``norm.logpdf``, ``norm(0, 1).logpdf``) or distribution object, or None (the front end then
    refuses the call with ``no_equivalent_message``). A method tlaloc.scipy refuses by name
    (``t.cdf``) gives a function raising that ``NoRuleError``."""
    table = _scipy_objects()
    owner = _scipy_owner(fn)
    frozen = getattr(owner, "dist", None)            # norm(loc, scale).logpdf: a frozen distribution
    if frozen is not None and hasattr(owner, "kwds"):
        from .. import scipy as tsp
        name = getattr(frozen, "name", None)
        if name in tsp.stats.__all__:
            ours = getattr(tsp.stats, name)(*owner.args, **owner.kwds)
            return _method(ours, fn.__name__, f"scipy.stats.{name}(...).{fn.__name__}")
    hit = table.get(id(owner))
    if hit is not None and hit[2] is owner:
        qual, ours, _ = hit
        if owner is fn:
            return ours
        return _method(ours, fn.__name__, f"{qual}.{fn.__name__}")
    return None


def _qualified_name(fn) -> str:
    """``scipy.integrate.odeint``, ``numpy.fft.fft``: the public module path and name of ``fn``."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    owner = _scipy_owner(fn)
    if owner is not fn and getattr(owner, "name", None) and getattr(type(owner), "__module__", "").startswith("scipy.stats"):
        return f"scipy.stats.{owner.name}.{name}"          # laplace.logpdf, not "scipy.stats.logpdf"
    if isinstance(fn, np.ufunc):
        return f"{'scipy.special' if is_scipy_callable(fn) else 'numpy'}.{name}"
    mod = getattr(fn, "__module__", None) or "numpy"
    parts = mod.split(".")
    import sys
    for k in range(1, len(parts) + 1):        # the shortest public module that exports it: scipy.integrate.solve_ivp
        public = sys.modules.get(".".join(parts[:k]))
        if public is not None and not any(p.startswith("_") for p in parts[:k]) and getattr(public, name, None) is fn:
            return f"{'.'.join(parts[:k])}.{name}"
    return ".".join([p for p in parts if not p.startswith("_")] + [name])


def no_equivalent_message(fn) -> str:
    """Why a NumPy/SciPy callable with array arguments is refused, and what to write instead."""
    qual = _qualified_name(fn)
    hint = _SCIPY_REFUSED.get(qual, "use a tlaloc.numpy / tlaloc.scipy function or tl.custom_vjp")
    return f"`{qual}` has no tlaloc equivalent yet; {hint}"


def _method(ours, method, qual):
    """``ours.method``; where tlaloc.scipy lacks or refuses it, a function raising that refusal
    when called (so that the front end places it at the user's call)."""
    from ..errors import NoRuleError
    try:
        return getattr(ours, method)
    except AttributeError:
        return _refuser(qual)
    except NoRuleError as e:
        message = str(e)

        def refuse(*args, **kwargs):
            raise NoRuleError(message)
        return refuse


def _refuser(qual):
    from ..errors import NoRuleError

    def refuse(*args, **kwargs):
        raise NoRuleError(f"`{qual}` has no tlaloc equivalent yet (tlaloc.scipy covers scipy.special/stats/"
                          f"linalg's common functions); use tlaloc.scipy functions or tl.custom_vjp")
    return refuse


def is_tlaloc_callable(fn) -> bool:
    mod = getattr(fn, "__module__", None) or ""
    return mod.startswith("tlaloc.numpy") or mod.startswith("tlaloc._prims") or \
        getattr(fn, "__self__", None).__class__.__module__ == "tlaloc._core.primitive"


def symbolic_len(x):
    r = x.aval.rank
    if r == 0:
        raise TypeError("len() of a 0-d array")
    if r is not None and type(x.aval.shape[0]) is int:
        return x.aval.shape[0]
    return _misc.dim_size(x, 0)


def builtin_call(fn, args, kwargs):
    """Symbolic-aware versions of the builtins user code calls; None if not handled."""
    if fn is builtins.len and len(args) == 1 and is_symbolic(args[0]):
        return True, symbolic_len(args[0])
    if fn is builtins.range and any(is_symbolic(a) for a in args):
        if len(args) == 1:
            return True, SymbolicRange(0, args[0], 1)
        return True, SymbolicRange(args[0], args[1], args[2] if len(args) > 2 else 1)
    if fn is builtins.abs and len(args) == 1 and is_symbolic(args[0]):
        return True, tnp.abs(args[0])
    if fn in (builtins.max, builtins.min) and len(args) == 1 and is_symbolic(args[0]) and not kwargs:
        return True, (tnp.max if fn is builtins.max else tnp.min)(args[0], axis=0)
    if fn in (builtins.max, builtins.min) and len(args) >= 2 and any(is_symbolic(a) for a in args):
        op = tnp.maximum if fn is builtins.max else tnp.minimum
        out = args[0]
        for a in args[1:]:
            out = op(out, a)
        return True, out
    if (fn in (builtins.max, builtins.min, builtins.sorted) and len(args) == 1 and isinstance(args[0], (list, tuple))
            and set(kwargs) <= ({"reverse"} if fn is builtins.sorted else set()) and _scalars(args[0])):
        # max([a, b, c]) / sorted([...]) of numbers computed here (0-d): as Python orders them
        # (regression: refused, "the builtin `max` cannot take an array")
        items = list(args[0])
        if fn is builtins.sorted:
            order = tnp.sort(tnp.stack([tnp.asarray(i) for i in items]))
            ranked = [order[k] for k in range(len(items))]
            return True, ranked[::-1] if kwargs.get("reverse") else ranked
        op = tnp.maximum if fn is builtins.max else tnp.minimum
        out = items[0]
        for a in items[1:]:
            out = op(out, a)
        return True, out
    if fn is builtins.sum and len(args) >= 1 and not is_symbolic(args[0]):
        items = list(args[0])
        if any(is_symbolic(i) for i in items):
            out = args[1] if len(args) > 1 else 0
            for i in items:
                out = out + i
            return True, out
    if fn is builtins.sum and len(args) == 1 and is_symbolic(args[0]):
        return True, tnp.sum(args[0], axis=0)
    if fn is builtins.pow and len(args) == 2 and any(is_symbolic(a) for a in args):
        return True, args[0] ** args[1]
    return False, None


def is_user_class(cls) -> bool:
    """A class defined in the user's code (not tlaloc's, NumPy's, SciPy's or a builtin)."""
    mod = getattr(cls, "__module__", "") or ""
    return not (mod.startswith("tlaloc") or mod.startswith("numpy") or mod.startswith("scipy")
                or mod in ("builtins", "warnings", "collections", "typing", "abc"))


def is_user_function(fn) -> bool:
    if isinstance(fn, LocalFunction):
        return True
    if not isinstance(fn, types.FunctionType):
        return False
    mod = getattr(fn, "__module__", "") or ""
    return not (mod.startswith("tlaloc.") or mod.startswith("numpy") or mod.startswith("scipy.")
                or mod in ("builtins", "warnings"))


def _scalars(items) -> bool:
    """A non-empty sequence of numbers, at least one computed here, none of a known rank above 0."""
    if not items or not any(is_symbolic(i) for i in items):
        return False
    for i in items:
        if is_symbolic(i):
            if i.aval.rank not in (None, 0):
                return False
        elif not isinstance(i, (int, float, np.generic)) or isinstance(i, bool):
            return False
    return True
