"""Lowering ``for`` and ``while`` (``ControlLowerer``'s loops; see ``control.py`` for the jumps).

* ``for i in range(...)`` becomes a ``for_range`` node; ``for`` over a static
  sequence is unrolled; ``for x in array`` iterates over ``range(len(array))``.
* ``while`` on a static condition unrolls until the condition becomes an array
  value, then becomes a ``while_loop`` node.
* A loop with a ``break`` guards its whole body by ``not broke``, so a ``for``
  keeps its static trip count.
"""
from __future__ import annotations

import ast

import numpy as np

from .. import _pytree
from .. import numpy as tnp
from .._core.aval import AbstractValue
from .._core.builder import Builder
from .._core.control import for_range_p, join_aval, undef_literal, while_loop_p
from .._core.graph import Graph, Literal, Var
from .analysis import assigned_names, has_jump, inplace_names
from .control import _UNDEF, _is_array, _is_data
from .values import BROKE, CONT, RET, RETURNED, StaleView, SymbolicRange, Undefined, is_symbolic

_MAX_STATIC_TRIPS = 10_000


class LoopLowerer:
    """Mixin of ``Lowerer``."""

    # -- for ------------------------------------------------------------------------
    def stmt_For(self, node):
        if node.orelse:
            raise self.src.error(node, "`for ... else` is not supported; use a flag variable")
        it = self.expr(node.iter)
        if isinstance(it, SymbolicRange) or is_symbolic(it):
            from .structure import ShapeNeeded, StaticMutation
            saved = (self.b, dict(self.env), self.in_loop)
            n = None
            try:
                if is_symbolic(it):
                    from .calls import symbolic_len
                    n = symbolic_len(it)
                    self.lower_for_range(node, 0, n, 1, it)
                else:
                    self.lower_for_range(node, it.start, it.stop, it.step, None)
            except StaticMutation as e:
                if type(n) is int:
                    # specialised: the array's length is known, so the body that appends to a
                    # Python list runs once per row, unrolled, as it does in plain Python
                    self.b, self.env, self.in_loop = saved[0], saved[1], saved[2]
                    self.lower_static_for(node, [tnp._getitem(it, k) for k in range(n)])
                    return
                if not self.ctx.specialisable:
                    raise
                # the body appends to a list (or draws at call time): unrolled once the length is known
                raise self.src.error(node, f"{e.args[0]} (a loop over a length that is not known yet)",
                                     ShapeNeeded) from None
        elif isinstance(it, range):
            from .structure import StaticMutation
            saved = (self.b, dict(self.env), self.in_loop)
            try:
                self.lower_for_range(node, it.start, it.stop, it.step, None)
            except StaticMutation:
                # the body appends to a Python list (or similar): unroll the static range
                self.b, self.env, self.in_loop = saved[0], saved[1], saved[2]
                self.lower_static_for(node, list(it))
        else:
            self.lower_static_for(node, self._iterate_static(it, node.iter))

    def lower_static_for(self, node, items):
        outer_in_loop, self.in_loop = self.in_loop, True
        saved_broke = self.env.get(BROKE, False)
        self.env[BROKE] = False
        self.env[CONT] = False
        try:
            self._static_iterations(node, items)
        finally:
            self.in_loop = outer_in_loop
        returned = self.env.get(RETURNED, False)
        self.env[BROKE] = returned if (outer_in_loop and returned is not False) else saved_broke
        self.env[CONT] = False

    def _static_iterations(self, node, items):
        for k, item in enumerate(items):
            if self.env.get(BROKE) is True or self.env.get(RETURNED) is True:
                return
            guard = self.pending_guard()
            if guard is not None:
                # the remaining iterations run only if no earlier one jumped out
                rest = items[k:]
                self.lower_guard(guard, lambda: self._static_iterations(node, rest),
                                 assigned_names([node]), node)
                return
            self.assign(node.target, item)
            self.block(node.body)
            self.env[CONT] = False

    def lower_for_range(self, node, start, stop, step, iterate_over):
        if not isinstance(node.target, ast.Name):
            if iterate_over is None:
                raise self.src.error(node.target, "a `for` over range() needs a single loop variable")
        if not is_symbolic(step) and step == 0:
            raise self.src.error(node.iter, "range() step must not be zero")
        body = node.body
        breaks, carried, init, views = self._loop_carry(node, exclude=_target_names(node.target))
        target_name = node.target.id if isinstance(node.target, ast.Name) else "i"

        def build_body(child, carry_values):
            self.env[BROKE] = carry_values.get(BROKE, False) if breaks else False
            self.env[CONT] = False
            i = child.new_input(AbstractValue(np.dtype(np.int64), (), weak=True), target_name)
            # the values the index takes (None: not known yet): a window x[i:i + c] is proved in range
            # from them (expr._window)
            static = all(type(b) is int for b in (start, stop, step))
            self.ctx.loop_ranges[id(i)] = (i, range(start, stop, step) if static else None)
            if iterate_over is None:
                self.env[target_name] = i
            else:
                self.assign(node.target, tnp._getitem(iterate_over, i))
            return i

        outs = self._emit_loop("for", node, carried, init, build_body, breaks,
                               lambda body_graph, operands, n_carry, n_consts: for_range_p.bind(
                                   start, stop, step, *operands, body=body_graph, n_carry=n_carry,
                                   n_consts=n_consts, n_xs=0, reverse=False), views=views)
        self._after_loop(carried, outs, views)

    def _loop_carry(self, node, exclude=()):
        """``(breaks, carried names, their values before the loop)``: the names the body
        assigns and reads after, plus the jump flags it needs."""
        breaks = has_jump(node.body, (ast.Break, ast.Return))
        carried = self._carried_names(node.body, node, exclude=exclude)
        carried += [n for n in self._inplace_aliases(node) if n not in carried]
        if breaks:
            carried.append(BROKE)
        if has_jump(node.body, (ast.Return,)):
            carried += [RET, RETURNED]
        init_env = dict(self.env)
        init_env[BROKE] = False
        init = [init_env.get(n, _UNDEF) for n in carried]
        return breaks, carried, init, self.plan_loop_views(node, carried, init)

    def _inplace_aliases(self, node) -> list[str]:
        """The names bound, before the loop, to an array that the body writes in place through
        another name (``b = a`` then ``b[i] = v`` in the loop): NumPy changes it for all of them,
        so they are all carried, as one value (``_emit_loop``). Refused where the loop cannot keep
        them one value: one is rebound in the body, or one is a view of another array."""
        rebound = set(assigned_names(node.body, rebound_only=True))
        out = []
        for n in inplace_names(node.body):
            v = self.env.get(n)
            if not _is_array(v):
                continue
            self.refuse_inplace_view(node, n, v)
            group = [m for m, w in self.env.items() if w is v and not m.startswith(".")]
            if len(group) < 2:
                continue
            if rebound & set(group):
                m = sorted(rebound & set(group))[0]
                raise self.src.error(node, f"`{n}` is written in place in this loop while it names the same "
                                           f"array as {', '.join(f'`{g}`' for g in group if g != n)}, and "
                                           f"`{m}` is rebound in the loop; copy first (`{n} = {n}.copy()`) "
                                           f"or build new arrays (`{n} = {n} + ...`)")
            out.extend(m for m in group if m not in out)
        return out

    def _carried_names(self, body, node, exclude=()):
        assigned = [n for n in assigned_names(body) if n not in exclude]
        later = self._loaded_outside(node)
        return [n for n in assigned if (n in self.env and not isinstance(self.env[n], Undefined))
                or n in later]

    def _loaded_outside(self, node) -> set:
        fn_body = getattr(self.src.node, "body", [])
        inside = {id(n) for n in ast.walk(node)}
        out = set()
        for st in fn_body if isinstance(fn_body, list) else []:
            for n in ast.walk(st):
                if id(n) in inside:
                    continue
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                    out.add(n.id)
        return out

    def _emit_loop(self, kind, node, carried, init, build_body, guard_body, emit, cond_fn=None, views=None):
        """Lower a loop body (to a fixed point of the carry types, and of the names that may be
        views of the carried arrays: ``views.py``) and emit the loop node."""
        flat_init, trees, static_keep = [], [], {}
        for name, v in zip(carried, init):
            if v is _UNDEF or isinstance(v, Undefined):
                flat_init.append(undef_literal())
                trees.append(None)
                continue
            leaves, tree = _pytree.flatten(v)
            for leaf in leaves:
                if not _is_data(leaf):
                    raise self.src.error(node, f"`{name}` holds a {type(leaf).__name__} and is reassigned in "
                                               f"the loop; only arrays and numbers can be loop variables")
            flat_init.extend(leaves)
            trees.append(tree)
        avals = [_aval_of(x) for x in flat_init]
        written = set(inplace_names(node.body))
        aliases = {}            # carried name -> the first carried name bound to the same array
        for j, nj in enumerate(carried):
            for i in range(j):
                if _is_array(init[j]) and init[i] is init[j] and {carried[i], nj} & written:
                    aliases[nj] = aliases.get(carried[i], carried[i])
                    break
        parent = self.b
        env0 = dict(self.env)
        outer_in_loop = self.in_loop
        for attempt in range(4):
            child = Builder(parent=parent, name=f"{kind}_body")
            child.loc = parent.loc
            self.b = child
            self.env = dict(env0)
            self.in_loop = True
            with child.active():
                carry_vals = {}
                idx_input = build_body(child, {}) if kind == "for" else None
                ins = [child.new_input(a, _hint_for(carried, trees, k)) for k, a in enumerate(avals)]
                k = 0
                for name, tree in zip(carried, trees):
                    if tree is None:
                        self.env[name] = ins[k]
                        carry_vals[name] = ins[k]
                        k += 1
                    else:
                        val = _pytree.unflatten(tree, ins[k:k + tree.num_leaves])
                        self.env[name] = val
                        carry_vals[name] = val
                        k += tree.num_leaves
                for name, first in aliases.items():      # one array under several names stays one
                    self.env[name] = carry_vals[name] = carry_vals[first]
                if views is not None:
                    views.groups = aliases
                    self.loop_body_views(views)
                if kind == "for" and BROKE in carry_vals:
                    self.env[BROKE] = carry_vals[BROKE]
                if guard_body and is_symbolic(self.env.get(BROKE)):
                    self.lower_guard(tnp.logical_not(self.env[BROKE]), lambda: self.block(node.body),
                                     assigned_names(node.body), node)
                else:
                    self.block(node.body)
                self.env[CONT] = False
                if views is not None:
                    self.refuse_unseen_writes(node, views, carried)
                grew = views is not None and self.loop_end_views(views, carried)
                outs = []
                for name, tree in zip(carried, trees):
                    v = self.env.get(name, _UNDEF)
                    if isinstance(v, StaleView):
                        raise self.src.error(node, f"{v.message} (`{name}` is carried from one trip of this "
                                                   f"loop to the next, or past it)")
                    if v is _UNDEF or isinstance(v, Undefined):
                        raise self.src.error(node, f"`{name}` may be undefined at the end of the loop body")
                    leaves, t2 = _pytree.flatten(v)
                    if tree is not None and t2 != tree:
                        raise self.src.error(node, f"`{name}` changes structure inside the loop "
                                                   f"({tree!r} -> {t2!r})")
                    outs.extend(child.atom(l) if not isinstance(l, Literal) else l for l in leaves)
                body_graph = Graph(tuple(child.inputs) + tuple(child.capture_vars), tuple(child.nodes),
                                   tuple(outs), child.name)
            self.b = parent
            self.in_loop = outer_in_loop
            new_avals = [join_aval(a, o.aval) for a, o in zip(avals, outs)]
            if new_avals == avals and not grew:
                break
            if grew and attempt == 3:
                raise self.src.error(node, "cannot tell which names of this loop are views of the arrays it "
                                           "writes in place; copy the views you take (`r = A[i].copy()`)")
            avals = new_avals
        self.env = env0
        n_carry = len(flat_init)
        # captured outer values become loop constants
        consts = list(child.captures)
        cond_graph = None
        if kind == "while":
            cond_graph, cond_consts = cond_fn(carried, trees, avals)
            body_graph, cond_graph, consts = _share_consts(body_graph, child, cond_graph, cond_consts,
                                                           n_carry, offset_body=0)
        operands = flat_init + consts
        with self.b.at(self.src.loc(node)):
            if kind == "while":
                outs = emit(body_graph, cond_graph, operands, n_carry, len(consts))
            else:
                outs = emit(body_graph, operands, n_carry, len(consts))
        result = {}
        k = 0
        for name, tree in zip(carried, trees):
            n = 1 if tree is None else tree.num_leaves
            vals = list(outs[k:k + n])
            for v in vals:
                if is_symbolic(v) and not name.startswith("."):
                    v.var.hint = name
            result[name] = vals[0] if tree is None else _pytree.unflatten(tree, vals)
            k += n
        for name, first in aliases.items():
            result[name] = result[first]
        return result

    def _after_loop(self, carried, outs, views=None):
        for name in carried:
            if name != BROKE:
                self.env[name] = outs[name]
        if views is not None:
            self.apply_loop_views(views)
        # the loop's own break flag ends with the loop; a return also leaves enclosing loops
        self.env[BROKE] = outs[RETURNED] if (RETURNED in outs and self.in_loop) else False

    # -- while ------------------------------------------------------------------------
    def stmt_While(self, node):
        if node.orelse:
            raise self.src.error(node, "`while ... else` is not supported; use a flag variable")
        jumps = has_jump(node.body, (ast.Break, ast.Continue, ast.Return))
        trips = 0
        while True:
            test = self.expr(node.test)
            if is_symbolic(test) or jumps:
                break
            if not test:
                return
            trips += 1
            if trips > _MAX_STATIC_TRIPS:
                raise self.src.error(node, f"a `while` on a static condition ran {_MAX_STATIC_TRIPS} times "
                                           f"while lowering; make the condition depend on an array")
            outer, self.in_loop = self.in_loop, True
            self.block(node.body)
            self.in_loop = outer
        from .structure import ShapeNeeded, StaticMutation
        try:
            self.lower_while(node)
        except StaticMutation as e:
            # `while i < len(x): vals.append(...)`: a condition on a size not known yet; built again
            # once it is, where the loop runs in Python as it does in plain Python (regression: refused)
            if not self.ctx.specialisable:
                raise
            raise self.src.error(node, f"{e.args[0]} (a `while` on a condition not known yet)", ShapeNeeded) from None

    def lower_while(self, node):
        body = node.body
        breaks, carried, init, views = self._loop_carry(node)
        lowerer = self
        parent = self.b

        def cond_fn(carried_names, trees, avals):
            child = Builder(parent=parent, name="while_cond")
            child.loc = parent.loc
            saved_env, saved_b = lowerer.env, lowerer.b
            lowerer.env = dict(saved_env)
            lowerer.b = child
            with child.active():
                ins = [child.new_input(a, _hint_for(carried_names, trees, k)) for k, a in enumerate(avals)]
                k = 0
                for name, tree in zip(carried_names, trees):
                    n = 1 if tree is None else tree.num_leaves
                    lowerer.env[name] = ins[k] if tree is None else _pytree.unflatten(tree, ins[k:k + n])
                    k += n
                for name, first in (views.groups or {}).items():
                    lowerer.env[name] = lowerer.env[first]
                lowerer.loop_body_views(views, in_cond=True)
                test = lowerer.expr(node.test)
                if BROKE in lowerer.env and is_symbolic(lowerer.env[BROKE]):
                    test = tnp.logical_and(test, tnp.logical_not(lowerer.env[BROKE]))
                g = child.finish([test], "while_cond")
            lowerer.env, lowerer.b = saved_env, saved_b
            return g, list(child.captures)

        def build_body(child, carry_values):
            self.env[CONT] = False
            return None

        outs = self._emit_loop("while", node, carried, init, build_body, breaks,
                               lambda body_graph, cond_graph, operands, n_carry, n_consts: while_loop_p.bind(
                                   *operands, cond=cond_graph, body=body_graph, n_carry=n_carry,
                                   n_consts=n_consts, max_trips=None),
                               cond_fn=cond_fn, views=views)
        self._after_loop(carried, outs, views)


# -- helpers ---------------------------------------------------------------------------------

def _share_consts(body_graph, body_builder, cond_graph, cond_consts, n_carry, offset_body):
    """Give the while body and condition one list of constants (the union)."""
    consts, index = [], {}
    for c in list(body_builder.captures) + list(cond_consts):
        if c.var.id not in index:
            index[c.var.id] = len(consts)
            consts.append(c)

    def rebuild(g, caps, n_explicit):
        mine = dict(zip([c.var.id for c in caps], g.inputs[n_explicit:]))
        inputs = list(g.inputs[:n_explicit]) + [mine.get(c.var.id) or Var(c.var.aval, c.var.hint) for c in consts]
        return Graph(tuple(inputs), g.nodes, g.outputs, g.name)

    body = rebuild(body_graph, list(body_builder.captures), n_carry)
    cond = rebuild(cond_graph, list(cond_consts), n_carry)
    return body, cond, consts


def _aval_of(x) -> AbstractValue:
    if is_symbolic(x):
        return x.aval
    if isinstance(x, Literal):
        return x.aval
    from .._core import aval as _aval
    return _aval.of(x)


def _hint_for(carried, trees, k):
    pos = 0
    for name, tree in zip(carried, trees):
        n = 1 if tree is None else tree.num_leaves
        if pos <= k < pos + n:
            return name.lstrip(".")
        pos += n
    return None


def _target_names(target):
    if isinstance(target, ast.Name):
        return (target.id,)
    if isinstance(target, (ast.Tuple, ast.List)):
        out = ()
        for e in target.elts:
            out += _target_names(e)
        return out
    return ()
