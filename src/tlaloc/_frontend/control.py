"""Lowering ``if`` and the jumps inside it (loops: ``loops.py``).

* An ``if`` on a static value lowers only the branch taken. On an array value
  both branches are lowered into regions of a ``cond`` node whose outputs are
  the names either branch assigns.
* ``return``/``break``/``continue`` set flags (``.returned``, ``.broke``,
  ``.continued``). When a flag is symbolic after a branch, the statements
  after it are guarded by ``if not flag`` (see ``Lowerer.block``); a loop with
  a ``break`` guards its whole body by ``not broke`` (``loops.py``).
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .._core.builder import Builder
from .._core.control import cond_p, undef_literal
from .._core.graph import Graph, Var
from .analysis import assigned_names, has_jump
from .values import FLAGS, RET, StaleView, Undefined, is_symbolic

_UNDEF = object()      # a leaf slot with no value on some path


def _is_data(v) -> bool:
    """Values that can flow through control flow as operands."""
    return is_symbolic(v) or isinstance(v, (bool, int, float, np.ndarray, np.generic)) or v is None


def _is_array(v) -> bool:
    return is_symbolic(v) or isinstance(v, np.ndarray)


class ControlLowerer:
    """Mixin for ``Lowerer``."""

    # -- if ----------------------------------------------------------------------------
    def stmt_If(self, node):
        test = self.expr(node.test)
        if not is_symbolic(test):
            self.block(node.body if test else node.orelse)
            return
        names = assigned_names(node.body + node.orelse)
        if has_jump(node.body + node.orelse):
            names += [n for n in (RET,) + FLAGS if n not in names]
        self.lower_if(test, lambda: self.block(node.body), lambda: self.block(node.orelse), names, node)

    def lower_guard(self, guard, then_fn, names, node):
        """``if guard: then_fn()`` where ``guard`` says no jump flag is set."""
        names = list(names) + [n for n in (RET,) + FLAGS if n not in names]

        def then():
            for f in FLAGS:
                self.env[f] = False
            then_fn()
        self.lower_if(guard, then, lambda: None, names, node)

    def lower_if(self, test, then_fn, else_fn, names, node):
        env0 = dict(self.env)
        parent = self.b
        branches = []
        for fn in (then_fn, else_fn):
            child = Builder(parent=parent, name="branch")
            child.loc = parent.loc
            self.env = dict(env0)
            self.b = child
            try:
                with child.active():
                    fn()
            finally:
                self.b = parent
            branches.append((child, self.env))
        self.env = env0
        # a name that no statement of the branch assigns can still change there: an in-place
        # write through an alias (`b = a` before the `if`, `b[0] = v` in it) rebinds it too
        names = list(names) + [n for n, v in env0.items() if n not in names and _is_array(v)
                               and any(env.get(n, v) is not v for _, env in branches)]
        before = dict(env0)                             # (env0 is self.env: the merge rebinds it)
        self._merge_branches(test, names, branches, env0, node)
        self.merge_if_views(names, branches, before)    # views of merged arrays (views.py)

    def _merge_branches(self, test, names, branches, env0, node):
        line = f"line {self.src.loc(node).lineno}"
        per_branch = []     # [(leaves, tree)] per name per branch
        keep = []
        for name in names:
            vals, stale = [], []
            for _, env in branches:
                v = env.get(name, env0.get(name, _UNDEF))
                if isinstance(v, StaleView):
                    stale.append(v)
                if isinstance(v, Undefined):
                    v = _UNDEF
                vals.append(v)
            if stale:
                # a view gone stale on a path that goes on: stale after the `if` (views.py)
                live = [not self._branch_terminated(env) for _, env in branches]
                if any(l and isinstance(env.get(name, env0.get(name)), StaleView)
                       for l, (_, env) in zip(live, branches)) or all(v is _UNDEF for v in vals):
                    self.env[name] = stale[0]
                    continue
            if all(v is _UNDEF for v in vals):
                continue
            if any(v is _UNDEF for v in vals):
                terminated = [self._branch_terminated(env) for _, env in branches]
                if name in (RET,) or all(t or v is not _UNDEF for t, v in zip(terminated, vals)):
                    keep.append((name, vals, "undef"))
                else:
                    self.env[name] = Undefined(name, line)
                continue
            if all(_same_static(v, vals[0]) for v in vals):
                self.env[name] = vals[0]
                continue
            keep.append((name, vals, None))
        if not keep:
            return
        # flatten every kept name to leaves, with a structure shared by both branches
        layouts = []
        branch_leaves = [[], []]
        for name, vals, mode in keep:
            trees = [None if v is _UNDEF else _pytree.flatten(v) for v in vals]
            tree = next(t[1] for t in trees if t is not None)
            for t in trees:
                if t is not None and t[1] != tree:
                    raise self.src.error(node, f"`{name}` has a different structure in the two branches "
                                               f"({t[1]!r} vs {tree!r})")
            n = tree.num_leaves
            for bi, t in enumerate(trees):
                if t is None:
                    branch_leaves[bi].extend([_UNDEF] * n)
                else:
                    for leaf in t[0]:
                        if not _is_data(leaf):
                            raise self.src.error(node, f"`{name}` holds a {type(leaf).__name__} that differs "
                                                       f"between the branches of an `if` on an array; only "
                                                       f"arrays and numbers can")
                    branch_leaves[bi].extend(t[0])
            layouts.append((name, tree, n))
        graphs = []
        for (child, _), leaves in zip(branches, branch_leaves):
            with child.active():
                outs = [undef_literal() if l is _UNDEF else (child.atom(l) if l is not None else undef_literal())
                        for l in leaves]
            graphs.append(Graph(tuple(child.inputs), tuple(child.nodes), tuple(outs), child.name))
        operands, graphs = _unify_captures([b for b, _ in branches], graphs)
        outs = cond_p_bind(self.b, test, operands, graphs[0], graphs[1], hints=_hints(layouts))
        k = 0
        for name, tree, n in layouts:
            self.env[name] = _pytree.unflatten(tree, outs[k:k + n])
            k += n

    def _branch_terminated(self, env) -> bool:
        return any(env.get(f) is True or is_symbolic(env.get(f)) for f in FLAGS)


# -- helpers ---------------------------------------------------------------------------------

def cond_p_bind(builder, test, operands, g_true, g_false, hints=None):
    outs = cond_p.bind(test, *operands, true_branch=g_true, false_branch=g_false)
    if hints:
        for o, h in zip(outs, hints):
            if h and o.var.hint is None:
                o.var.hint = h
    return outs


def _hints(layouts):
    out = []
    for name, tree, n in layouts:
        base = name.lstrip(".")
        out.extend([base] * n)
    return out


def _unify_captures(builders, graphs):
    """Give every branch the same inputs: the union of what each captured."""
    operands, index = [], {}
    for b in builders:
        for outer in b.captures:
            if outer.var.id not in index:
                index[outer.var.id] = len(operands)
                operands.append(outer)
    new_graphs = []
    for b, g in zip(builders, graphs):
        mine = {outer.var.id: inner for outer, inner in zip(b.captures, b.capture_vars)}
        inputs = []
        for outer in operands:
            inputs.append(mine.get(outer.var.id) or Var(outer.var.aval, outer.var.hint))
        new_graphs.append(Graph(tuple(inputs), g.nodes, g.outputs, g.name))
    return operands, new_graphs








def _same_static(a, b) -> bool:
    if is_symbolic(a) or is_symbolic(b):
        return a is b
    if a is b:
        return True
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False
