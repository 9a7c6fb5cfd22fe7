"""Syntactic facts about statements: assigned names, names read, jumps."""
from __future__ import annotations

import ast


def inplace_names(stmts) -> list[str]:
    """Names whose array ``stmts`` may write in place (not descending into nested defs):
    ``a += v``, ``a[i] = v``, ``a[i][j] -= v`` and ``np.add.at(a, ...)``, in first-seen order."""
    out: list[str] = []

    def add(t):
        while isinstance(t, ast.Subscript):
            t = t.value
        if isinstance(t, ast.Name) and t.id not in out:
            out.append(t.id)

    class V(ast.NodeVisitor):
        def visit_Assign(self, n):
            for t in n.targets:
                if isinstance(t, ast.Subscript):
                    add(t)
            self.generic_visit(n)

        def visit_AugAssign(self, n):
            add(n.target)
            self.generic_visit(n)

        def visit_Call(self, n):
            if isinstance(n.func, ast.Attribute) and n.func.attr == "at" and n.args:
                add(n.args[0])
            self.generic_visit(n)

        def visit_FunctionDef(self, n):
            pass

        def visit_Lambda(self, n):
            pass

    v = V()
    for s in stmts:
        v.visit(s)
    return out


def assigned_names(stmts, rebound_only=False) -> list[str]:
    """Names bound by ``stmts`` (not descending into nested defs), in first-seen order. With
    ``rebound_only``, only the names bound to a new value (not ``a[i] = v`` or ``a += v``)."""
    out: list[str] = []

    def add(name):
        if name not in out:
            out.append(name)

    def target(t):
        if isinstance(t, ast.Name):
            add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                target(e)
        elif isinstance(t, ast.Starred):
            target(t.value)
        elif isinstance(t, ast.Subscript) and not rebound_only:
            base = t.value
            while isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                add(base.id)

    class V(ast.NodeVisitor):
        def visit_Assign(self, n):
            for t in n.targets:
                target(t)

        def visit_AugAssign(self, n):
            if not rebound_only:
                target(n.target)

        def visit_AnnAssign(self, n):
            if n.value is not None:
                target(n.target)

        def visit_For(self, n):
            target(n.target)
            for s in n.body + n.orelse:
                self.visit(s)

        def visit_FunctionDef(self, n):
            add(n.name)

        def visit_Lambda(self, n):
            pass

        def visit_NamedExpr(self, n):
            target(n.target)

    v = V()
    for s in stmts:
        v.visit(s)
    return out


def loaded_names(stmts) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.add(n.target.id)
    return out


def has_jump(stmts, kinds=(ast.Return, ast.Break, ast.Continue)) -> bool:
    """True if ``stmts`` may leave their block early: a ``return`` anywhere, or a
    ``break``/``continue`` not enclosed in an inner loop."""
    for s in stmts:
        if isinstance(s, kinds):
            return True
        if isinstance(s, ast.If):
            if has_jump(s.body, kinds) or has_jump(s.orelse, kinds):
                return True
        elif isinstance(s, (ast.For, ast.While)):
            if has_jump(s.body, (ast.Return,)) or has_jump(s.orelse, kinds):
                return True
    return False
