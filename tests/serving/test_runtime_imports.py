"""The runtime serves an artifact without the compiler: a folder rule, and a subprocess under an import guard.

The folder rule: no module of ``tlaloc.serving`` outside ``serving/export/`` (the runtime,
the server, Triton, the shared manifest and errors) has an import statement, at any depth,
of a compiler module (front ends, transforms, emitter, jit, specialisation, the primitive
table, tlaloc.numpy, tlaloc.models) or of ``tlaloc.serving.export``. The guard: a
meta-path hook refuses those modules and the test oracles; the child loads the artifact,
generates, and prints the ids, which must equal the in-process run.
"""
import json
import os
import subprocess
import sys

from core.test_layers import graph

FORBIDDEN = ["tlaloc._frontend", "tlaloc._ad", "tlaloc._render", "tlaloc._jit", "tlaloc._core", "tlaloc._prims",
             "tlaloc.numpy", "tlaloc.models", "tlaloc.nn", "tlaloc.serving.export", "torch", "transformers"]
EXPORT_SIDE = "tlaloc.serving.export"


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def runtime_side_violations(g: dict) -> list:
    """``(module, forbidden import)`` for every serving module outside serving/export/ that imports the compiler."""
    return sorted((m, t) for m, targets in g.items() for t in targets
                  if (m == "tlaloc.serving" or m.startswith("tlaloc.serving."))
                  and not (m == EXPORT_SIDE or m.startswith(EXPORT_SIDE + ".")) and _forbidden(t))


def test_only_the_export_folder_imports_the_compiler():
    g = graph()
    assert any(m.startswith("tlaloc.serving.runtime.") for m in g) and any(_forbidden(t) for t in
                                                                         g["tlaloc.serving.export.programs"])
    assert runtime_side_violations(g) == []


def test_folder_rule_catches_a_runtime_module_that_imports_the_export_side():
    """Negative control: a runtime module reaching into serving/export/, and a server module
    importing tlaloc.numpy inside a function, are both named."""
    extra = {"tlaloc.serving.runtime.probe": "from ..export import programs\n",
             "tlaloc.serving.server.probe": "def f():\n    from ... import numpy\n    return numpy\n"}
    found = runtime_side_violations(graph(extra))
    assert ("tlaloc.serving.runtime.probe", "tlaloc.serving.export.programs") in found
    assert ("tlaloc.serving.server.probe", "tlaloc.numpy") in found


def test_the_documented_import_paths_still_work():
    import tlaloc.serving as serving
    from tlaloc.serving.export import export
    from tlaloc.serving.limits import ServerLimits
    from tlaloc.serving.server import ServerLimits as Limits, create_app, run_server  # noqa: F401
    from tlaloc.serving.runtime.engine import Engine
    assert serving.Engine is Engine and ServerLimits is Limits and callable(export) and callable(serving.perplexity)

CHILD = r"""
import importlib.abc, json, sys
FORBIDDEN = {forbidden!r}

class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
            raise ImportError(f"import guard: the serving runtime imported {{name}}")
        return None

sys.meta_path.insert(0, Guard())
from tlaloc.serving import Engine
engine = Engine({artifact!r}, fast_compile=True)
results = engine.generate([[3, 17, 99, 5], "hi"], max_new_tokens=6, stop=[])
rid = engine.submit([7, 8], max_new_tokens=3)
events = []
while engine.has_work():
    events += [e.token_ids for e in engine.step()]
loaded = sorted(m for m in sys.modules if m.startswith("tlaloc"))
print(json.dumps({{"ids": [r.token_ids for r in results], "text": results[1].text, "loaded": loaded}}))
"""


def test_runtime_runs_under_an_import_guard(artifact, engine):
    art = artifact("llama")
    code = CHILD.format(forbidden=FORBIDDEN, artifact=art)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    want = engine("llama").generate([[3, 17, 99, 5], "hi"], max_new_tokens=6, stop=[])
    assert out["ids"] == [r.token_ids for r in want] and out["text"] == want[1].text
    assert not [m for m in out["loaded"] if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


def test_guard_catches_a_forbidden_import():
    """Negative control: the same guard stops a compiler import."""
    code = CHILD.split("from tlaloc.serving import Engine")[0].format(forbidden=FORBIDDEN) + "import tlaloc.numpy\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "import guard: the serving runtime imported tlaloc.numpy" in proc.stderr
