"""Reading a function's source: its AST with line and column mapped back to
the user's file."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

from .._core.graph import SourceLoc
from ..errors import FenceError


@dataclasses.dataclass
class FunctionSource:
    fn: object
    node: ast.AST              # FunctionDef or Lambda
    filename: str
    line_offset: int           # add to ast lineno
    col_offset: int            # add to ast col_offset
    lines: list                # the file's lines (for comments)

    def loc(self, node: ast.AST) -> SourceLoc:
        lineno = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset + 1
        text = self.lines[lineno - 1].strip() if 0 < lineno <= len(self.lines) else ""
        return SourceLoc(self.filename, lineno, col, text)

    def error(self, node: ast.AST, message: str, cls=FenceError) -> FenceError:
        loc = self.loc(node)
        return cls(message, loc.filename, loc.lineno, loc.col)


def installed_package(filename: str):
    """The top-level package name when ``filename`` lies in an installed third-party package
    (``site-packages`` / ``dist-packages``, tlaloc itself excepted), else None."""
    parts = str(filename).replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rest = parts[parts.index(marker) + 1:]
            if rest and rest[0] != "tlaloc":
                return rest[0][:-3] if rest[0].endswith(".py") else rest[0]
    return None


def user_call_site():
    """``(filename, lineno, col)`` of the innermost frame outside tlaloc and installed packages:
    where the user applied the transform; ``(None, None, None)`` if there is none."""
    import os
    import sys
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # the tlaloc package
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not os.path.abspath(name).startswith(here + os.sep) and installed_package(name) is None \
                and not name.startswith("<"):
            positions = inspect.getframeinfo(frame).positions
            col = positions.col_offset + 1 if positions and positions.col_offset is not None else None
            return name, frame.f_lineno, col
        frame = frame.f_back
    return None, None, None


def read_source(fn) -> FunctionSource:
    """Parse ``fn``'s source. Raises FenceError when no source is available."""
    code = getattr(fn, "__code__", None)
    if code is None:
        hint = ""
        if type(fn).__name__ == "Jitted":
            hint = ("; a tl.jit function is compiled code, not source: apply the transform first and "
                    "compile the result, e.g. tl.jit(tl.grad(f)) rather than tl.grad(tl.jit(f))")
        raise FenceError(f"cannot read the source of {fn!r}: only Python functions can be transformed{hint}")
    try:
        # the code object, not the function: inspect.getsource follows __wrapped__
        # (functools.wraps), which would silently drop a decorator's own code
        lines, start = inspect.getsourcelines(code)
        filename = inspect.getsourcefile(code) or code.co_filename
    except (OSError, TypeError) as e:
        raise FenceError(f"cannot read the source of `{fn.__name__}` ({e}); define it in a file, "
                         f"not in an interactive prompt or exec()") from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if dedented != text else 0
    try:
        with open(filename, encoding="utf-8") as fh:
            file_text = fh.read()
    except OSError:
        file_text = None
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        # a lambda inside a larger expression (a dict or list of lambdas, a call's argument that
        # spans lines): its lines alone do not parse; the file does, and the lambda is found in it
        # by its parameters and its instructions' source positions
        tree = _parse_file(file_text) if code.co_name == "<lambda>" else None
        if tree is None:
            raise FenceError(f"cannot parse the source of `{fn.__name__}` on its own (a lambda inside "
                             f"a larger expression?); define it with `def`", filename, start, 1) from None
        start, indent = 1, 0
    if file_text is not None:
        file_lines = file_text.splitlines()
    else:
        file_lines = [l.rstrip("\n") for l in lines]
        start = 1
    node = _find(tree, fn, start, indent)
    return FunctionSource(fn, node, filename, start - 1, indent, file_lines)


def _parse_file(text):
    if text is None:
        return None
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _find(tree, fn, start, indent=0):
    name = fn.__code__.co_name
    if name == "<lambda>":
        lambdas = _matching_lambdas(tree, fn.__code__, start, indent)
        if len(lambdas) != 1:
            raise FenceError(f"cannot tell which lambda on line {start} to transform; "
                             f"give it a name with `def`")
        return lambdas[0]
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
            if isinstance(n, ast.AsyncFunctionDef):
                raise FenceError(f"`async def {name}` cannot be differentiated; use a plain def")
            return n
    raise FenceError(f"cannot find the definition of `{name}` in its source")


def _matching_lambdas(tree, code, start, indent):
    """The lambdas of ``tree`` that can be ``code``: the same parameter names and, where
    several remain (``lambda ans, x: lambda g: ...`` on one line), the innermost whose
    span holds every source position of ``code``'s instructions."""
    n_params = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    params = code.co_varnames[:n_params]
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Lambda):
            a = n.args
            names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
            if sorted(names) == sorted(params):
                found.append(n)
    if len(found) <= 1:
        return found
    spots = [(line, col) for line, _, col, _ in code.co_positions() if line is not None and col is not None]

    def span(n):
        return ((start + n.lineno - 1, n.col_offset + indent), (start + n.end_lineno - 1, n.end_col_offset + indent))
    def holds(n, spot):
        return span(n)[0] <= spot <= span(n)[1]
    spots = [spot for spot in spots if any(holds(n, spot) for n in found)]    # not the line's RESUME
    inside = [n for n in found if spots and all(holds(n, spot) for spot in spots)]
    inside.sort(key=lambda n: (span(n)[1][0] - span(n)[0][0], span(n)[1][1] - span(n)[0][1]))
    return inside[:1] if inside else found
