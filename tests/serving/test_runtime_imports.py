"""The runtime serves an artifact without the compiler: a subprocess under an import guard.

A meta-path hook refuses every compiler module (front ends, transforms, emitter, jit,
specialisation, the primitive table, tlaloc.numpy, tlaloc.models) and the test oracles;
the child loads the artifact, generates, and prints the ids, which must equal the
in-process run.
"""
import json
import os
import subprocess
import sys

FORBIDDEN = ["tlaloc._frontend", "tlaloc._ad", "tlaloc._render", "tlaloc._jit", "tlaloc._core", "tlaloc._prims",
             "tlaloc.numpy", "tlaloc.models", "tlaloc.nn", "tlaloc.serving.export", "tlaloc.serving.programs",
             "torch", "transformers"]

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
