"""Layers import only downward (DESIGN.md §0), checked on the import graph of src/tlaloc.

Every ``import`` statement counts, including those inside functions (a deferred
import is still a dependency; it only hides a cycle from the interpreter).
``importlib.import_module`` with a name held as data is not an import statement:
``tlaloc._core.rules`` loads the rule modules that way, as a registry of plugins.

A module's layer is that of the longest prefix in ``LAYERS`` naming it. An
upward edge fails the test unless ``ALLOWED`` lists it with its reason; that list
only shrinks (an entry that no longer occurs fails too).
"""
import ast
import functools
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"

#: Layer number -> module prefixes (relative to ``tlaloc``); see docs_layers.md.
LAYERS = {
    1: ["", "errors", "dtypes", "_pytree"],
    2: ["_core.aval", "_core.graph", "_core.builder", "_core.primitive", "_core.printer", "_core.verifier",
        "_core.interpreter", "_core.passes", "_core.rules", "_annotations"],
    3: ["_prims", "_core.control"],
    4: ["numpy", "random", "scipy"],
    5: ["_frontend", "typing", "_typecheck", "sharding", "_core.simplify", "_ad.reverse", "_ad.forward",
        "_ad.forward_rules", "_ad.control_rules", "_ad.batching", "_ad.batching_control", "_ad.batching_index",
        "_ad.batching_linalg", "_ad.batching_rules", "_ad.custom", "_ad.custom_call", "_ad.custom_passes",
        "_ad.symbolic_zeros"],
    6: ["_render", "_runtime", "_recognize", "kernels", "_core.specialize", "_core.specialize_control",
        "_core.specialize_linalg", "_core.specialize_rules", "_jit.bounded", "_jit.bounded_rules",
        "_jit.bounded_queries", "_jit.bounded_export", "_jit.stages"],
    7: ["_ad", "_jit", "checkpoint_io", "distributed", "extend"],
    8: ["nn", "optim", "misc", "models", "serving.export", "serving.manifest", "serving.errors"],
    9: ["serving", "cli", "launch"],        # serving/runtime/, server/, triton/ (no compiler: test_runtime_imports)
}

#: ``(importer, imported) -> why``: upward imports still in the code. Shrink it; never grow it.
ALLOWED = {}


def module_name(path: pathlib.Path) -> tuple:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def imports_of(name: str, is_pkg: bool, source: str, known) -> set:
    """The ``tlaloc`` modules that ``source`` (module ``name``) imports, at any depth."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            if not (t == "tlaloc" or t.startswith("tlaloc.")):
                continue
            while t not in known and "." in t:
                t = t.rsplit(".", 1)[0]
            if t != name:
                out.add(t)
    return out


def layer_of(module: str) -> int | None:
    rel = module[len("tlaloc."):] if module.startswith("tlaloc.") else ""
    best, n = -1, None
    for layer, prefixes in LAYERS.items():
        for p in prefixes:
            if (rel == p or rel.startswith(p + ".") or p == "") and len(p) > best:
                best, n = len(p), layer
    return n


@functools.lru_cache(maxsize=1)
def _files() -> tuple:
    return tuple((module_name(p), p.read_text()) for p in (SRC / "tlaloc").rglob("*.py"))


def graph(extra: dict | None = None) -> dict:
    """``{module: set of tlaloc modules it imports}``; ``extra`` adds ``{module: source}``."""
    files = dict(_files())
    for mod, src in (extra or {}).items():
        files[(mod, False)] = src
    known = {m for m, _ in files}
    return {m: imports_of(m, pkg, src, known) for (m, pkg), src in files.items()}


def upward(g: dict) -> list:
    """Every ``(importer, layer, imported, layer)`` edge that points up."""
    out = []
    for m, targets in sorted(g.items()):
        for t in sorted(targets):
            lm, lt = layer_of(m), layer_of(t)
            if lt > lm:
                out.append((m, lm, t, lt))
    return out


def test_every_module_is_in_a_layer_below_the_serving_runtime_or_named():
    assert all(layer_of(m) is not None for m in graph())


def test_layers_import_only_downward():
    bad = [f"{m} (layer {lm}) imports {t} (layer {lt})" for m, lm, t, lt in upward(graph())
           if (m, t) not in ALLOWED]
    assert not bad, "upward imports (fix them, or list them in ALLOWED with a reason):\n" + "\n".join(bad)


def test_the_allowlist_only_shrinks():
    edges = {(m, t) for m, _, t, _ in upward(graph())}
    stale = sorted(set(ALLOWED) - edges)
    assert not stale, f"these allowed upward imports are gone: remove them from ALLOWED: {stale}"


def test_negative_control_an_upward_import_is_caught_by_name():
    """A synthetic DXIR-layer module that reaches up to the jit API, at module level
    and inside a function: both are named."""
    extra = {"tlaloc._core.probe_upward": "from .._jit import api\n",
             "tlaloc._core.probe_deferred": "def f():\n    from ..nn import Linear\n    return Linear\n"}
    found = {(m, t) for m, _, t, _ in upward(graph(extra))}
    assert ("tlaloc._core.probe_upward", "tlaloc._jit.api") in found
    assert ("tlaloc._core.probe_deferred", "tlaloc.nn") in found


def test_the_cycles_the_architecture_issue_named_are_gone():
    g = graph()
    for a, b in [("tlaloc._core.builder", "tlaloc.numpy"), ("tlaloc._core.builder", "tlaloc._frontend.typing_hooks"),
                 ("tlaloc._ad.custom", "tlaloc._ad.custom_passes"), ("tlaloc._jit.transformed", "tlaloc._jit.lowering"),
                 ("tlaloc._ad.custom_passes", "tlaloc._core.specialize"), ("tlaloc._typecheck", "tlaloc.typing"),
                 ("tlaloc._frontend.names", "tlaloc.typing")]:
        assert b not in g[a], f"{a} imports {b} again"
