"""NumPy views under in-place writes.

In NumPy, ``r = A[0]`` (basic slicing, ``A.T``, ``np.transpose``, ``swapaxes``, ``expand_dims``,
``squeeze``, ``x[None]``, ``np.flip``, ``np.diagonal``, ``broadcast_to``, and ``reshape`` of a
contiguous array) makes ``r`` share ``A``'s memory: a later in-place write into ``A``
(``A[i] = v``, ``A += v``, ``np.add.at(A, ...)``) changes ``r`` too. Here arrays are values, so
after such a write every live name that holds a view of the old ``A`` is rebound to the same
view of the new ``A``: the view's nodes are replayed on it (``replay``), transitively for views
of views. Advanced indexing copies in NumPy and is never rebound.

Where the relation is not certain (a reshape of an array whose layout is not known, a name bound
in an ``if`` or loop on array values to a view of some array), the name is marked stale
(``StaleView``): reading it afterwards is refused at the read, naming both arrays and the write.
Such uncertain relations are kept as ``Context.may_share`` edges (symmetric, by var id).

Across control flow: after an ``if``, a name that is the same view of the same array on every
path is rebuilt from the merged array (``merge_if_views``); a view taken before a loop of an array
the loop writes in place is replayed on the loop's carried array in the body and after the loop
(``plan_loop_views`` / ``apply_loop_views``); a loop that cannot do so (it also rebinds the array,
or a name it does not carry changes in its body) is refused. A write inside an inlined call into
its argument reaches the caller's names too (``Lowerer.caller``), as NumPy's would."""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from .._core.graph import Literal, Var
from .._prims.elementwise import UNARY
from .values import StaleView, Undefined, is_symbolic

# always views in NumPy (reshape: only where the layout allows it; getitem: basic indexing only)
_ALWAYS_VIEW = frozenset(("transpose", "swapaxes", "expand_dims", "squeeze", "broadcast_to", "flip",
                          "diagonal"))
VIEW_PRIMS = _ALWAYS_VIEW | {"getitem", "reshape"}

_BINARY = frozenset(("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "arctan2",
                     "remainder", "floor_divide", "less", "less_equal", "greater", "greater_equal", "equal",
                     "not_equal", "logical_and", "logical_or", "safe_mul", "safe_div", "select", "clamp",
                     "integer_pow"))
_SAME_LAYOUT = frozenset(("copy", "convert", "expand_dims", "squeeze", "reshape", "reduce_sum", "reduce_max",
                          "reduce_min", "reduce_prod", "reduce_any", "reduce_all"))
_MAX_DEPTH = 32

EXACT, MAYBE = "exact", "maybe"
RESHAPE_REASON = "NumPy's reshape returns a view only of a contiguous array, which is not known here"
SHAPE_REASON = "whether the index makes a view depends on shapes not known here"
RANK_REASON = "whether `+=` writes in place depends on its rank, which is not known here"
PATH_REASON = "that depends on the path taken through an `if` or loop on array values"
ZERO_D_REASON = ("`+=` writes into a 0-d array in place but makes a new NumPy scalar, and which of the two "
                 "this is is not known here")
_SHAPE_REASONS = (RESHAPE_REASON, SHAPE_REASON, RANK_REASON)


def canon(v):
    """The value a region's capture input stands for (followed out to the builder that made it)."""
    while is_symbolic(v):
        outer = v.builder.outer.get(v.var.id)
        if outer is None:
            return v
        v = outer
    return v


def _same(a, b) -> bool:
    if is_symbolic(a) and is_symbolic(b):
        return canon(a).var is canon(b).var
    return a is b


def _operand(builder, atom):
    """A node input as a value: a canonical ``Value``, or the literal's own object."""
    if isinstance(atom, Literal):
        return atom.value
    return canon(builder.value(atom))


def _static_shape(aval):
    shape = getattr(aval, "shape", None)
    if shape is None or any(type(d) is not int for d in shape):
        return None
    return tuple(shape)


_BOOL_PRIMS = frozenset(("less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and",
                         "logical_or", "logical_not", "logical_xor", "isnan", "isinf", "isfinite", "signbit"))


def _is_mask(builder, atom) -> bool:
    """An index made by a comparison or logical operation (a boolean mask) while its dtype is
    not known yet."""
    if not isinstance(atom, Var):
        return False
    v = canon(builder.value(atom))
    node = v.builder.producer(v)
    return node is not None and node.prim.name in _BOOL_PRIMS


def _getitem_kind(node, x_aval, builder=None):
    """``EXACT`` for basic indexing (a view), None where NumPy copies (advanced indexing, or a
    scalar from integers only), ``MAYBE`` where that depends on an unknown rank."""
    spec = node.params["spec"]
    dyn = node.inputs[1:]
    unknown = False
    for e in spec:
        if e[0] == "d":
            aval = dyn[e[1]].aval
            if aval.dtype is not None and np.dtype(aval.dtype).kind not in "iu":
                return None                         # a mask: a copy
            if aval.dtype is None and builder is not None and _is_mask(builder, dyn[e[1]]):
                return None
            if aval.shape is None:
                unknown = True                      # an integer (a view) or an index array (a copy)
            elif aval.shape != ():
                return None                         # an index array: a copy
    if all(e[0] in "id" for e in spec):
        rank = x_aval.rank
        if rank is None:
            return MAYBE
        if len(spec) >= rank:
            return None                             # a NumPy scalar, not a view
    return MAYBE if unknown else EXACT


def _reshape_splits_only(in_shape, out_shape) -> bool:
    """True when the reshape merges no two axes of size > 1 (it only splits axes or adds or
    drops size-1 axes): NumPy then returns a view whatever the layout."""
    a = [d for d in in_shape if d != 1]
    b = [d for d in out_shape if d != 1]
    i = j = 0
    while i < len(a) and j < len(b):
        pa, pb, n_in = a[i], b[j], 1
        i += 1
        j += 1
        while pa != pb:
            if pa < pb:
                if i >= len(a):
                    return False
                pa *= a[i]
                i += 1
                n_in += 1
            else:
                if j >= len(b):
                    return False
                pb *= b[j]
                j += 1
        if n_in > 1:
            return False
    return i == len(a) and j == len(b)


def layout_is_c(v, depth=0, memo=None) -> bool:
    """True only when ``v`` is certainly a C-contiguous array in NumPy (an array of one axis of
    size > 1 or fewer counts: it has no axis order to disagree with)."""
    if not is_symbolic(v):
        return isinstance(v, np.ndarray) and v.flags.c_contiguous or np.ndim(v) == 0
    v = canon(v)
    memo = {} if memo is None else memo
    key = (id(v.var), depth > 0)
    if key not in memo:
        memo[key] = False               # (a cycle cannot happen; this only bounds the work)
        memo[key] = _layout_is_c(v, depth, memo)
    return memo[key]


def _layout_is_c(v, depth, memo) -> bool:
    shape = _static_shape(v.aval)
    if shape is None:
        return False
    if sum(d != 1 for d in shape) <= 1 and depth > 0:
        return True                                 # an operand with no axis order
    if depth > _MAX_DEPTH:
        return False
    node = v.builder.producer(v)
    if node is None:
        return False
    name = node.prim.name
    ins = [_operand(v.builder, a) for a in node.inputs]
    arrays = [a for a in ins if (a.aval.rank != 0 if is_symbolic(a) else np.ndim(a) > 0)]
    if name in _BINARY or name in UNARY or name == "concatenate":
        # NumPy's order='K': one operand of the full shape in C order, or no operand that prefers
        # another order, gives a C-ordered result
        if any(_static_shape(a.aval if is_symbolic(a) else np.asarray(a)) == shape and layout_is_c(a, depth + 1, memo)
               for a in arrays) and name != "concatenate":
            return True
        return all(layout_is_c(a, depth + 1, memo) for a in arrays)
    if name == "matmul":
        return True
    if name in _SAME_LAYOUT:
        return bool(arrays) and layout_is_c(arrays[0], depth + 1, memo)
    return False


def view_step(v):
    """``(kind, base, node, builder)`` when ``v`` (canonical) is a view of ``base`` made by
    ``node``, else None. ``kind`` is ``EXACT`` or ``MAYBE`` (a reshape whose being a view depends on
    a layout not known here, or an index whose result depends on an unknown rank)."""
    b = v.builder
    node = b.producer(v)
    if node is None or node.prim.name not in VIEW_PRIMS or not node.inputs:
        return None
    base = _operand(b, node.inputs[0])
    if not is_symbolic(base) and not isinstance(base, np.ndarray):
        return None
    name = node.prim.name
    if name == "getitem":
        kind = _getitem_kind(node, node.inputs[0].aval, b)
    elif name == "reshape":
        s_in, s_out = _static_shape(node.inputs[0].aval), _static_shape(node.outputs[0].aval)
        if s_in is not None and s_out is not None and _reshape_splits_only(s_in, s_out):
            kind = EXACT
        else:
            kind = EXACT if layout_is_c(base) else MAYBE
    else:
        kind = EXACT
    return None if kind is None else (kind, base, node, b)


@dataclasses.dataclass
class Relation:
    kind: str                   # EXACT: ``chain`` replayed on the new base gives the view; MAYBE
    chain: list                 # [(node, builder)] from the base out to the value
    reason: str = ""


def relation(ctx, val, old):
    """How ``val`` relates to the array ``old`` (a value or a constant ndarray): ``EXACT`` (the
    same array, or a view of it, with its chain of view nodes), ``MAYBE`` (it may share its
    memory), or None."""
    if not is_symbolic(val):
        return None
    target = canon(old) if is_symbolic(old) else old
    best = None
    seen = set()
    stack = [(canon(val), [], True, "")]
    while stack:
        v, chain, exact, reason = stack.pop()
        if not is_symbolic(v):                      # a view of a constant array
            if isinstance(target, np.ndarray) and isinstance(v, np.ndarray):
                if v is target and exact:
                    return Relation(EXACT, chain)
                if np.shares_memory(v, target):
                    best = best or Relation(MAYBE, [], reason or "it is a view of a part of that array")
            continue
        v = canon(v)
        if id(v.var) in seen:
            continue
        seen.add(id(v.var))
        if is_symbolic(target) and v.var is target.var:
            if exact:
                return Relation(EXACT, chain)
            best = best or Relation(MAYBE, [], reason)
            continue
        for w, why in ctx.may_share.get(v.var.id, ()):
            stack.append((w, None, False, reason or why))
        step = view_step(v)
        if step is not None:
            kind, base, node, b = step
            why = reason
            if kind == MAYBE and not why:
                why = (RESHAPE_REASON if node.prim.name == "reshape" else SHAPE_REASON)
            stack.append((base, None if chain is None else [(node, b)] + chain, exact and kind == EXACT, why))
    return best


def is_array(v) -> bool:
    return is_symbolic(v) or isinstance(v, np.ndarray)


def related(ctx, a, b):
    """None, or why ``a`` and ``b`` may share memory across control flow (one is, or may be, a view
    of the other): a reason that depends on shapes not known yet, or ``PATH_REASON``."""
    if a is b:
        return PATH_REASON
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return PATH_REASON if np.shares_memory(a, b) else None
    for rel in (relation(ctx, a, b), relation(ctx, b, a)):
        if rel is not None:
            return rel.reason if rel.kind == MAYBE and rel.reason in _SHAPE_REASONS else PATH_REASON
    return None


def _key(v):
    return id(canon(v).var) if is_symbolic(v) else id(v)


def _reach(ctx, v, memo):
    """``(keys, constants)``: the arrays ``v`` is, or is (or may be) a view of, walking up view
    nodes and ``may_share`` links: the keys of symbolic ones, and the constant arrays."""
    k = _key(v)
    if k in memo:
        return memo[k]
    keys, consts = {k}, []
    if isinstance(v, np.ndarray):
        consts.append(v)
    memo[k] = (keys, consts)
    stack = [v]
    while stack:
        w = stack.pop()
        if not is_symbolic(w):
            continue
        w = canon(w)
        ups = [u for u, _ in ctx.may_share.get(w.var.id, ())]
        step = view_step(w)
        if step is not None:
            ups.append(step[1])
        for u in ups:
            ku = _key(u)
            if ku in keys:
                continue
            keys.add(ku)
            if isinstance(u, np.ndarray):
                consts.append(u)
            stack.append(u)
    return keys, consts


class _Index:
    """The names among ``items`` (name, array) that an array may share memory with, found through
    ``_reach`` sets instead of testing every pair."""

    def __init__(self, ctx, items, memo=None):
        self.ctx, self.memo = ctx, {} if memo is None else memo
        self.by_key, self.reached_by, self.consts = {}, {}, []
        for n, v in items:
            ks, cs = _reach(ctx, v, self.memo)
            self.by_key.setdefault(_key(v), []).append(n)
            for k in ks:
                self.reached_by.setdefault(k, []).append(n)
            if cs:
                self.consts.append((n, cs))

    def candidates(self, v):
        ks, cs = _reach(self.ctx, v, self.memo)
        out = set(self.reached_by.get(_key(v), ()))
        for k in ks:
            out.update(self.by_key.get(k, ()))
        if cs:
            out.update(n for n, cs2 in self.consts if any(np.shares_memory(x, y) for x in cs for y in cs2))
        return out


def add_may_share(ctx, a, b, reason=PATH_REASON):
    """Record that the arrays ``a`` and ``b`` may share memory (both directions; a constant
    array is recorded on the symbolic side only), and why tlaloc cannot tell."""
    if not is_symbolic(a):
        a, b = b, a
    if not is_symbolic(a) or not is_array(b):
        return
    a, b = canon(a), canon(b)
    if is_symbolic(b) and a.var is b.var:
        return
    for x, y in ((a, b), (b, a)):
        if not is_symbolic(x):
            continue
        lst = ctx.may_share.setdefault(x.var.id, [])
        if not any(w is y or (is_symbolic(w) and is_symbolic(y) and w.var is y.var) for w, _ in lst):
            lst.append((y, reason))


def replay(chain, new, cache=None):
    """The view ``chain`` (view nodes from a base out) applied to ``new`` instead of its base."""
    w = new
    for node, b in chain:
        key = (id(node), id(w))
        if cache is not None and key in cache:
            w = cache[key]
            continue
        args = [w] + [_operand(b, a) for a in node.inputs[1:]]
        w2 = node.prim.bind(*args, **node.params)
        if cache is not None:
            cache[key] = w2
        w = w2
    return w


def chains_equal(c1, c2) -> bool:
    """Two view chains that apply the same nodes (same primitives, parameters and operands)."""
    if len(c1) != len(c2):
        return False
    for (n1, b1), (n2, b2) in zip(c1, c2):
        if n1.prim is not n2.prim or len(n1.inputs) != len(n2.inputs):
            return False
        try:
            if n1.params != n2.params:
                return False
        except Exception:
            return False
        for a1, a2 in zip(n1.inputs[1:], n2.inputs[1:]):
            x1, x2 = _operand(b1, a1), _operand(b2, a2)
            if is_symbolic(x1) or is_symbolic(x2):
                if not _same(x1, x2):
                    return False
            elif not (x1 is x2 or (type(x1) is type(x2) and np.array_equal(x1, x2))):
                return False
    return True


def view_text(name, val):
    """``r = A[0]`` as the user wrote it (from the view node's source line), else None."""
    node = val.builder.producer(canon(val)) if is_symbolic(val) else None
    line = getattr(getattr(node, "loc", None), "line", "") or ""
    m = re.match(rf"^{re.escape(name)}\s*=\s*(.+?)\s*(#.*)?$", line)
    if m is None or "=" in m.group(1).replace("==", "").replace("<=", "").replace(">=", "").replace("!=", ""):
        return None
    return m.group(1)


def stale_view(name, val, base_name, where, reason, expr=None):
    expr = expr or view_text(name, val)
    copy = f"`{name} = {expr}.copy()`" if expr else f"`{name} = ....copy()` where you take it"
    after = f"take `{name}` after that write" if expr is None else f"take `{name} = {expr}` after that write"
    msg = (f"`{name}` may share memory with `{base_name}` (be a view of it, or the same array), which was "
           f"written in place at {where}, so NumPy's `{name}` could show that write; tlaloc cannot follow "
           f"it here ({reason}). If the old value is meant, copy it ({copy}); otherwise {after}")
    return StaleView(name, where, msg, reason in _SHAPE_REASONS)



class ViewLowerer:
    """Mixin of ``Lowerer``."""

    def rebind_after_write(self, node, name, old, new, maybe_reason=None):
        """After the in-place write of ``name`` (``old`` -> ``new``): every other name bound to
        ``old`` is rebound to ``new``, every view of ``old`` to the same view of ``new``, and a
        name that may share memory with ``old`` in a way not known here is marked stale.
        ``maybe_reason``: views are only possible, not certain (e.g. the rank is unknown)."""
        cache = {}
        line = self.src.loc(node).lineno
        self._rebind_env(self.env, node, name, old, new, cache, maybe_reason, f"line {line}", skip=name)
        caller = self.caller
        while caller is not None:
            # an argument of a call is the caller's array: NumPy writes into it there too
            fname = getattr(self.src.node, "name", "a function")
            self._rebind_env(caller.env, node, name, old, new, cache, maybe_reason,
                             f"line {line} (in `{fname}`)", skip=None)
            caller = caller.caller

    def _rebind_env(self, env, node, name, old, new, cache, maybe_reason, where, skip):
        for other, val in list(env.items()):
            if other == skip or other.startswith(".") or isinstance(val, Undefined):
                continue
            if val is old:
                env[other] = new
                continue
            if isinstance(val, (tuple, list, dict)):
                self._rebind_in_container(env, node, name, other, val, old, new, cache, maybe_reason)
                continue
            if isinstance(val, np.ndarray) and is_symbolic(old) and relation(self.ctx, old, val) is not None:
                # a constant array that the written one may be (or view), depending on the path taken
                env[other] = stale_view(other, val, name, where, relation(self.ctx, old, val).reason)
                continue
            if not is_symbolic(val):
                continue
            rel = relation(self.ctx, val, old)
            if rel is None:
                continue
            if rel.kind == EXACT and maybe_reason is None:
                env[other] = replay(rel.chain, new, cache)
            else:
                expr = view_text(other, val) or (self.assigned_text(other, node) if skip is not None else None)
                env[other] = stale_view(other, val, name, where, maybe_reason or rel.reason, expr)

    def assigned_text(self, name, node):
        """The right-hand side of the last ``name = ...`` before ``node`` in this function, or None."""
        import ast
        line = getattr(node, "lineno", 0)
        best = None
        for n in ast.walk(self.src.node):
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and n.targets[0].id == name and n.lineno < line and (best is None or n.lineno > best.lineno)):
                best = n
        return None if best is None else ast.unparse(best.value)

    def _rebind_in_container(self, env, node, name, other, val, old, new, cache, maybe_reason):
        """Views of ``old`` held in a tuple, list or dict (``parts = np.split(A, 2)``) follow the
        write as named views do; one that cannot is refused at the write."""
        from .. import _pytree
        try:
            leaves, tree = _pytree.flatten(val)
        except Exception:
            return
        changed = False
        out = []
        for leaf in leaves:
            rel = None
            if leaf is old:
                leaf, changed = new, True
            elif is_symbolic(leaf):
                rel = relation(self.ctx, leaf, old)
            if rel is not None:
                if rel.kind != EXACT or maybe_reason is not None:
                    why = maybe_reason or rel.reason
                    if why in _SHAPE_REASONS and self.ctx.specialisable:
                        from .structure import ShapeNeeded
                        raise self.src.error(node, f"`{other}` holds what may be a view of `{name}`", ShapeNeeded)
                    raise self.src.error(node, f"`{other}` holds what may be a view of `{name}`, written in "
                                               f"place here; NumPy's view would show the write, which tlaloc "
                                               f"cannot follow ({maybe_reason or rel.reason}). Copy the views "
                                               f"you keep (`.copy()`), or take them after the write")
                leaf, changed = replay(rel.chain, new, cache), True
            out.append(leaf)
        if changed:
            env[other] = _pytree.unflatten(tree, out)

    def refuse_write_into_view(self, node, value, name=None):
        """A write into ``value`` when it is (or may be) a view of an array another live name holds,
        or of one from outside the function: NumPy would write through to that array; refused."""
        name = name or node.id
        if not is_symbolic(value):
            return
        v = canon(value)
        seen = set()
        maybe = False               # a step of the chain is a view or not depending on shapes not known here
        while True:
            step = view_step(v)
            if step is None:
                return
            kind, base, _, _ = step
            maybe = maybe or kind == MAYBE
            if not is_symbolic(base):
                for other, val in self.env.items():
                    if other != name and isinstance(val, np.ndarray) and np.shares_memory(val, base):
                        self._view_refusal(node, name, other, maybe)
                return
            base = canon(base)
            if id(base.var) in seen:
                return
            seen.add(id(base.var))
            lowerer, whose = self, ""
            while lowerer is not None:      # a call's argument may be a view of the caller's array
                for other, val in lowerer.env.items():
                    if ((other != name or lowerer is not self) and not other.startswith(".") and is_symbolic(val)
                            and canon(val).var is base.var):
                        self._view_refusal(node, name, whose + other, maybe)
                lowerer, whose = lowerer.caller, "the caller's "
            for key, val in self.ctx.closure_keys.items():
                if is_symbolic(val) and canon(val).var is base.var:
                    self._shapes_needed(node, name, key[-1], maybe)
                    raise self.src.error(node, f"`{name}` is a view of the array `{key[-1]}` from outside the "
                                               f"function; NumPy would change `{key[-1]}` in place. Copy it "
                                               f"first (`{name} = {name}.copy()`) or build a new array")
            v = base

    def _shapes_needed(self, node, target, name, maybe):
        """Where ``target`` is only maybe a view of ``name`` (``x[0]`` of an array of unknown rank: a
        view of a 2-d one, a NumPy scalar of a 1-d one), the build is redone with the arguments'
        shapes, known at the first call (ShapeNeeded); only a certain view is refused."""
        if maybe and self.ctx.specialisable:
            from .structure import ShapeNeeded
            raise self.src.error(node, f"whether `{target}` is a view of `{name}` depends on shapes known at the "
                                       f"first call", ShapeNeeded)

    def _view_refusal(self, node, target, name, maybe=False):
        whose, _, name = name.rpartition(" ")
        whose = whose + " " if whose else ""
        self._shapes_needed(node, target, name, maybe)
        raise self.src.error(node, f"`{target}` is a view of {whose}`{name}` (NumPy would write through to "
                                   f"`{name}`); write into `{name}` directly, or copy first with "
                                   f"`{target} = {target}.copy()`")

    # -- if ---------------------------------------------------------------------------------------
    def merge_if_views(self, names, branches, env0):
        """After an ``if`` on an array value, each array a merged name holds (or holds in a
        container) that is an output of the ``if``:

        * the same array as other names on every path that goes on: they are bound to one merged
          array (one of theirs);
        * the same view of the same named array on every path: rebuilt as that view of the merged
          array (the names it depends on first, so that a view of a view ends on the root);
        * otherwise, (possibly) a view of another array on some path: recorded as possibly sharing
          its memory (``may_share``), as is an array left unchanged on some path and rebound on
          another (it may still be the old one).

        ``env0``: the names before the ``if``."""
        from .. import _pytree
        envs = [env for _, env in branches]

        def at(env, n):
            return env.get(n, env0.get(n))

        def leaves(v, tree):
            if v is None or isinstance(v, Undefined):
                return None
            try:
                lv, t = _pytree.flatten(v)
            except Exception:
                return None
            return lv if t == tree else None

        slots = []          # [name, leaf index, output value, [(value on a path, that path's env)], tree]
        for r in names:
            post = self.env.get(r)
            if r.startswith(".") or post is None or isinstance(post, Undefined):
                continue
            try:
                post_leaves, tree = _pytree.flatten(post)
            except Exception:
                continue
            defined = [(lv, env) for lv, env in ((leaves(at(env, r), tree), env) for env in envs) if lv is not None]
            if not defined:
                continue
            before = leaves(env0.get(r), tree)
            for k, p in enumerate(post_leaves):
                if not is_symbolic(p) or any(lv[k] is p for lv, _ in defined):
                    continue                    # not an output of this `if`
                paths = [(lv[k], env) for lv, env in defined]
                slots.append((r, k, p, paths, tree, None if before is None else before[k]))
        if not slots:
            return
        plain = {r for r, k, p, _, tree, _ in slots if tree.num_leaves == 1 and self.env.get(r) is p}
        memo, indexes = {}, {}

        def index(env):
            if id(env) not in indexes:
                indexes[id(env)] = _Index(self.ctx, [(a, at(env, a)) for a in self.env
                                                     if not a.startswith(".") and is_array(at(env, a))], memo)
            return indexes[id(env)]

        # the named arrays each slot is the same as, or the same view of, on every path
        decided = {}        # slot index -> ("alias", name) | ("view", name, chain)
        for i, (r, k, p, paths, tree, _) in enumerate(slots):
            if not all(is_symbolic(v) for v, _ in paths):
                continue
            best = None
            for a in sorted(index(paths[0][1]).candidates(paths[0][0]), key=list(self.env).index):
                merged = self.env.get(a)
                if a == r or not is_symbolic(merged):
                    continue
                bases = [at(env, a) for _, env in paths]
                if not all(is_symbolic(b) for b in bases):
                    continue
                if all(v is b for (v, _), b in zip(paths, bases)):
                    if best is None:
                        best = ("alias", a)
                    continue
                rels = [relation(self.ctx, v, b) for (v, _), b in zip(paths, bases)]
                if (all(x is not None and x.kind == EXACT for x in rels) and rels[0].chain
                        and all(chains_equal(rels[0].chain, x.chain) for x in rels[1:])
                        and (best is None or best[0] == "alias" or len(rels[0].chain) > len(best[2]))):
                    best = ("view", a, rels[0].chain)
            if best is not None:
                decided[i] = best
        # names that are one array on every path: bound to the output of the first of them
        slot_of = {r: i for i, (r, k, p, _, tree, _) in enumerate(slots) if r in plain}
        group = {}

        def find(i):
            while group.get(i, i) != i:
                i = group[i]
            return i
        done = set()
        for i, d in decided.items():
            if d[0] == "alias":
                j = slot_of.get(d[1])
                if j is not None:
                    a, b = find(i), find(j)
                    group[max(a, b)] = min(a, b)
        for i in list(group):
            rep = find(i)
            if rep != i:
                r, k, _, _, tree, _ = slots[i]
                self._set_leaf(r, k, tree, self._leaf(*(slots[rep][x] for x in (0, 1, 4))))
                done.add(i)
        # the same view of a named array on every path: rebuilt, after that array if it is rebuilt too
        pending = {i: d for i, d in decided.items() if d[0] == "view"}
        while pending:
            progressed = False
            for i, d in list(pending.items()):
                j = slot_of.get(d[1])
                if j is not None and j != i and j in pending:
                    continue
                r, k, _, _, tree, _ = slots[i]
                self._set_leaf(r, k, tree, replay(d[2], self.env[d[1]]))
                done.add(i)
                del pending[i]
                progressed = True
            if not progressed:
                break
        # the rest may share memory with what they are (or may be) views of on some path
        for i, (r, k, p, paths, tree, before) in enumerate(slots):
            if i in done:
                continue
            out = self._leaf(r, k, tree)
            if not is_symbolic(out):
                continue
            if is_array(before) and any(v is before for v, _ in paths):
                add_may_share(self.ctx, out, before)
            whys = {}
            for v, env in paths:
                if not is_array(v):
                    continue
                for a in index(env).candidates(v):
                    if a != r and is_array(self.env.get(a)):
                        why = related(self.ctx, v, at(env, a))
                        if why and whys.get(a) in (None, PATH_REASON):
                            whys[a] = why
            for a, why in whys.items():
                add_may_share(self.ctx, out, self.env[a], why)

    def _leaf(self, r, k, tree):
        from .. import _pytree
        v = self.env.get(r)
        return v if tree.num_leaves == 1 and k == 0 and not isinstance(v, (tuple, list, dict)) \
            else _pytree.flatten(v)[0][k]

    def _set_leaf(self, r, k, tree, value):
        from .. import _pytree
        lv = list(_pytree.flatten(self.env[r])[0])
        lv[k] = value
        self.env[r] = _pytree.unflatten(tree, lv)

    # -- loops -------------------------------------------------------------------------------------
    def plan_loop_views(self, node, carried, init):
        """What a loop does to names that hold views of the arrays it carries (see the module
        docstring): returns a plan for ``loop_body_views`` and ``apply_loop_views``."""
        from .analysis import assigned_names, inplace_names
        written = set(inplace_names(node.body))
        rebound = set(assigned_names(node.body, rebound_only=True))
        carried_set = set(carried)
        plan = LoopViews(assigned=set(assigned_names(node.body)))
        arrays = [(n, v) for n, v in zip(carried, init) if is_symbolic(v) or isinstance(v, np.ndarray)]
        index = _Index(self.ctx, [(n, v) for n, v in self.env.items() if not n.startswith(".") and is_array(v)])
        for r, rv in self.env.items():
            if r.startswith(".") or not is_array(rv):
                continue
            near = index.candidates(rv)
            if r in carried_set:
                for a in near:
                    av = self.env[a]
                    if a != r and (a in carried_set or a not in plan.assigned):
                        why = related(self.ctx, rv, av)
                        if why:
                            plan.pairs[(r, a)] = why
                continue
            for a, av in arrays:
                if av is rv:
                    continue            # an alias: carried with it (_inplace_aliases)
                if a not in near:
                    continue
                if not is_symbolic(rv):
                    why = related(self.ctx, rv, av)
                    if why:
                        plan.may_after.append((r, a, why))
                    continue
                rel = relation(self.ctx, rv, av)
                if rel is None:
                    continue
                if a in written:
                    if rel.kind == EXACT and a not in rebound:
                        plan.derived.append((r, a, rel.chain))
                    else:
                        reason = rel.reason or f"this loop also rebinds `{a}`"
                        plan.stale[r] = stale_view(r, rv, a, f"line {self.src.loc(node).lineno} (the loop)", reason)
                    break
                plan.may_after.append((r, a, rel.reason if rel.kind == MAYBE and rel.reason in _SHAPE_REASONS
                                       else PATH_REASON))
        return plan

    def loop_body_views(self, plan, in_cond=False):
        """At the top of a loop body (or its condition): views taken before the loop follow the
        carried arrays; names that may share memory with a carried array are linked to it."""
        cache = {}
        for r, a, chain in plan.derived:
            self.env[r] = replay(chain, self.env[a], cache)
        for r, stale in plan.stale.items():
            self.env[r] = stale
        if not in_cond:
            for r, a, why in [(r, a, why) for (r, a), why in plan.pairs.items()] + plan.may_after:
                add_may_share(self.ctx, self.env.get(r), self.env.get(a), why)
            plan.start = dict(self.env)

    def refuse_unseen_writes(self, node, plan, carried):
        """At the end of a loop body: a name the loop does not carry that changed there (an array
        a call in the body wrote into in place, or a view of one) would keep its old value after
        the loop and in the next trip: refused."""
        carried_set = set(carried) | {r for r, _, _ in plan.derived} | set(plan.stale)
        for n, v in (plan.start or {}).items():
            if n in carried_set or n in plan.assigned or n.startswith(".") or self.env.get(n) is v:
                continue
            if is_symbolic(v) or isinstance(v, np.ndarray):
                raise self.src.error(node, f"`{n}` is changed in place inside this loop (through another name "
                                           f"for it or a view of it, or by a call that writes into its "
                                           f"argument), but the loop does not assign it, so it would keep its "
                                           f"old value; write into `{n}` by its own name in the loop, or return "
                                           f"the new array from the call and assign it (`{n} = f({n})`)")

    def loop_end_views(self, plan, carried):
        """At the end of a loop body: the carried names that are (or may be) views of another
        array there; returns True when that adds a pair the body was not lowered with."""
        new = False
        carried_set = set(carried)
        groups = plan.groups or {}
        index = None
        for r in carried:
            rv = self.env.get(r)
            if r.startswith(".") or not is_symbolic(rv):
                continue
            if index is None:
                index = _Index(self.ctx, [(n, v) for n, v in self.env.items() if not n.startswith(".") and is_array(v)])
            for a in index.candidates(rv):
                av = self.env[a]
                if a == r or (r, a) in plan.pairs:
                    continue
                if a not in carried_set and a in plan.assigned:
                    continue            # a name of this trip only
                if a in carried_set and groups.get(r, r) == groups.get(a, a):
                    continue            # carried as one array (_inplace_aliases)
                why = related(self.ctx, rv, av)
                if why:
                    plan.pairs[(r, a)] = why
                    new = True
        return new

    def apply_loop_views(self, plan):
        """After the loop (carried names bound to its results)."""
        cache = {}
        for r, a, chain in plan.derived:
            self.env[r] = replay(chain, self.env[a], cache)
        for r, stale in plan.stale.items():
            self.env[r] = stale
        for r, a, why in [(r, a, why) for (r, a), why in plan.pairs.items()] + plan.may_after:
            add_may_share(self.ctx, self.env.get(r), self.env.get(a), why)


@dataclasses.dataclass
class LoopViews:
    derived: list = dataclasses.field(default_factory=list)     # (name, carried array, view chain)
    stale: dict = dataclasses.field(default_factory=dict)       # name -> StaleView
    pairs: dict = dataclasses.field(default_factory=dict)       # (carried name, name) that may share -> why
    may_after: list = dataclasses.field(default_factory=list)   # (name, carried name, why) may share after
    assigned: set = dataclasses.field(default_factory=set)      # names the body assigns
    groups: dict = None                                         # name -> first name of its alias group
    start: dict = None                                          # the body's names at its top
