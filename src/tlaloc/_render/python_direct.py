"""Python rendering with direct NumPy calls, for graphs whose avals are concrete.

``render_module`` (``python.py``) writes every node as ``lax.<primitive>(...)``:
an eager entry point that tests its operands' types, then calls the
primitive's NumPy code (``_prims/_eager.py``). Where the avals of a node's
operands say which branch that entry takes (``_ad/signature_fold.py`` infers
them per argument signature), ``render_module_direct`` writes the NumPy code
that branch runs instead:

* ``add``/``subtract``/``multiply`` of an array as ``x + y``/``x - y``/``x * y``
  (``ndarray``'s operators call the same ufuncs), other plain-ufunc binaries and
  0-d operands as ``np.<ufunc>(x, y)``, ``negative`` as ``-x``;
* ``matmul`` and its two adjoints on float arrays of one dtype as ``@`` (with
  ``swapaxes(-1, -2)``, as ``_prims/linalg.py`` computes them);
* ``reduce_sum``, and ``sum_to``/``expand_reduced`` at known shapes, as the
  ``np.add.reduce``/``reshape`` calls their impls make;
* small constant arrays are built once, at module level.

Everything else stays a ``lax`` call. The NumPy calls are the same as the
``lax`` entries make, in the same order, so results are bit-identical.
"""
from __future__ import annotations

import numpy as np

from .._core.graph import Literal, Var
from .._core.simplify import literal_aval
from .python import Renderer, render_literal, render_module, render_param

_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*"}
#: binary primitives whose NumPy code is exactly this ufunc (``_prims/elementwise.py``)
_UFUNCS = {"add", "subtract", "multiply", "maximum", "minimum", "arctan2", "less", "less_equal", "greater",
           "greater_equal", "equal", "not_equal", "logical_and", "logical_or"}
# dtypes for which a Python number operand goes straight to the ufunc (``_eager._NATIVE``)
_NATIVE = frozenset(np.dtype(d) for d in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                          np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))
_FLOATS = frozenset(np.dtype(d) for d in (np.float16, np.float32, np.float64))
_HOIST_LIMIT = 64


def render_module_direct(functions, title: str) -> str:
    """``render_module`` with direct NumPy calls where the avals allow (module docstring)."""
    return render_module(functions, title, renderer=_Factory())


class _Factory:
    """Makes one ``DirectRenderer`` per function; they share the module's constants."""

    def __init__(self):
        self.constants: list = []          # (name, source)

    def __call__(self, namer):
        return DirectRenderer(namer, self.constants)

    def prelude(self) -> list:
        return [f"{name} = {src}" for name, src in self.constants] + ([""] if self.constants else [])


class DirectRenderer(Renderer):
    def __init__(self, namer, constants):
        super().__init__(namer)
        self.constants = constants

    def render_call(self, node, indent, functions=None):
        expr = None if functions else _direct(node, self)
        if expr is None:
            return super().render_call(node, indent, functions)
        self.emit(indent, f"{self.n.name(node.outputs[0])} = {expr}")

    def operand(self, a) -> str:
        """``a`` as an operand: a small constant array is named once at module level."""
        if isinstance(a, Literal) and isinstance(a.value, (np.ndarray, np.generic)) \
                and np.size(a.value) <= _HOIST_LIMIT:
            src = render_literal(a.value)
            for name, s in self.constants:
                if s == src:
                    return name
            name = f"_tl_const{len(self.constants)}"
            self.constants.append((name, src))
            return name
        return self.atom(a)


def _aval(a):
    return a.aval if isinstance(a, Var) else literal_aval(a.value)


def _strong(a) -> bool:
    return a.is_concrete and not a.weak


def _array(a) -> bool:
    """An ndarray at run time (a NumPy scalar has shape ())."""
    return _strong(a) and len(a.shape) >= 1


def _python_number(a) -> bool:
    return isinstance(a, Literal) and type(a.value) in (int, float)


def _direct(node, r: DirectRenderer):
    name = node.prim.name
    if node.prim.multiple_results or len(node.outputs) != 1:
        return None
    ins = node.inputs
    avals = [_aval(a) for a in ins]
    out = node.outputs[0].aval
    if name in _UFUNCS and len(ins) == 2 and not node.params:       # fresh results: constants may be shared
        return _binary(name, ins, avals, [r.operand(a) for a in ins])
    if name in ("matmul", "matmul_t_lhs", "matmul_t_rhs"):
        return _contraction(name, avals, [r.operand(a) for a in ins])
    ops = [r.atom(a) for a in ins]          # a reshape or a same-shape sum_to may return a view of its operand
    if name == "negative" and _strong(avals[0]):
        return f"-{ops[0]}" if _array(avals[0]) else f"np.negative({ops[0]})"
    if name == "zeros_like" and _strong(avals[0]):
        return f"np.zeros_like({ops[0]})"
    if name == "reduce_sum" and _array(avals[0]) and _strong(out):
        call = (f"np.add.reduce({ops[0]}, axis={render_param(node.params['axes'])}, "
                f"keepdims={node.params['keepdims']!r})")
        return call if len(out.shape) else f"np.asarray({call})"
    if name == "sum_to" and _array(avals[0]) and _strong(avals[1]) and avals[0].dtype == avals[1].dtype:
        return _sum_to(ops[0], avals[0].shape, tuple(avals[1].shape))
    if name == "expand_reduced" and not node.params["keepdims"] and _strong(avals[0]) and _strong(out):
        return f"np.asarray({ops[0]}).reshape({render_param(tuple(out.shape))})"
    return None


def _binary(name, ins, avals, ops):
    """What ``_eager.elementwise`` calls: the ufunc on arrays of one dtype, or on an array
    and a Python number."""
    x, y = avals
    if _strong(x) and _strong(y):
        if x.dtype != y.dtype:
            return None
    elif not ((_strong(x) and x.dtype in _NATIVE and _python_number(ins[1]))
              or (_strong(y) and y.dtype in _NATIVE and _python_number(ins[0]))):
        return None
    if name in _OPERATORS and (_array(x) or _array(y)):
        return f"{ops[0]} {_OPERATORS[name]} {ops[1]}"
    return f"np.{name}({ops[0]}, {ops[1]})"


def _contraction(name, avals, ops):
    """``_eager.contraction``: float arrays of one dtype; the adjoints' 2-D-or-more branch
    (``_mm_lhs_impl``/``_mm_rhs_impl``) where no summing-down follows."""
    if not all(_array(a) for a in avals) or len({a.dtype for a in avals}) != 1 or avals[0].dtype not in _FLOATS:
        return None
    if name == "matmul":
        return f"{ops[0]} @ {ops[1]}"
    if not all(len(a.shape) >= 2 for a in avals):
        return None
    g, m, target = avals
    try:
        batch = tuple(np.broadcast_shapes(tuple(g.shape[:-2]), tuple(m.shape[:-2])))
    except ValueError:
        return None
    if name == "matmul_t_lhs":          # g @ y^T, summed to x
        shape = batch + (g.shape[-2], m.shape[-2])
        expr = f"{ops[0]} @ {ops[1]}.swapaxes(-1, -2)"
    else:                               # x^T @ g, summed to y
        shape = batch + (m.shape[-1], g.shape[-1])
        expr = f"{ops[1]}.swapaxes(-1, -2) @ {ops[0]}"
    return expr if shape == tuple(target.shape) else None


def _sum_to(x: str, xshape, shape):
    """The calls ``_prims/broadcasting._sum_to_impl`` makes for these shapes."""
    lead = len(xshape) - len(shape)
    if lead < 0:
        return None
    if tuple(xshape) == shape:
        return None              # folded away where x is an array (signature_fold)
    if lead > 0 and tuple(xshape[lead:]) == shape:
        call = f"np.add.reduce({x}, axis={render_param(tuple(range(lead)))})"
        return call if shape else f"np.asarray({call})"
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape) if d == 1 and xshape[i + lead] != 1)
    if not axes:
        return f"{x}.reshape({render_param(shape)})"
    return f"np.add.reduce({x}, axis={render_param(axes)}, keepdims=True).reshape({render_param(shape)})"
