"""Golden files of rendered derivatives, and bit-identical re-runs of dumped source.

Regenerate the golden files with ``TLALOC_UPDATE_GOLDEN=1 pytest tests/render``.
"""
import importlib.util
import os
import pathlib

import numpy as np
import pytest

import tlaloc as tl

from . import golden_functions as gf

GOLDEN = pathlib.Path(__file__).parent / "golden"
rng = np.random.default_rng(0)

CASES = {
    "mlp_loss": (lambda: tl.grad(gf.mlp_loss, argnums=(0, 1)),
                 lambda: (rng.normal(size=(3, 4)), rng.normal(size=(4,)), rng.normal(size=(5, 3)), rng.normal(size=5))),
    "logsumexp_loop": (lambda: tl.grad(gf.logsumexp_loop), lambda: (rng.normal(size=6),)),
    "newton_sqrt": (lambda: tl.grad(gf.newton_sqrt), lambda: (np.float64(2.0),)),
    "closure_and_call": (lambda: tl.grad(gf.closure_and_call, argnums=(0, 1)),
                         lambda: (rng.normal(size=3), np.float64(0.7))),
    "histogram_update": (lambda: tl.grad(gf.histogram_update),
                         lambda: (rng.normal(size=6), np.array([0, 2, 2, 3, 0, 2]))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_derivative_matches_golden_file(name):
    g = CASES[name][0]()
    src = tl.source(g)
    path = GOLDEN / f"{name}.py"
    if os.environ.get("TLALOC_UPDATE_GOLDEN"):
        path.write_text(src)
    assert path.exists(), f"missing golden file {path}; run with TLALOC_UPDATE_GOLDEN=1"
    assert src == path.read_text(), f"rendered source of {name} changed; inspect and regenerate"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendering_is_deterministic(name):
    assert tl.source(CASES[name][0]()) == tl.source(CASES[name][0]())


def _flat(args):
    return [np.asarray(a) for a in args]


@pytest.mark.parametrize("name", sorted(CASES))
def test_dumped_file_reruns_bit_identically(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TLALOC_DUMP_SOURCE_DIR", str(tmp_path))
    g = CASES[name][0]()
    args = CASES[name][1]()
    expected = g(*args)
    files = list(tmp_path.glob("*.py"))
    assert [f.name for f in files] == [f"{g.__name__}.py"]
    spec = importlib.util.spec_from_file_location(f"dumped_{name}", files[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    got = getattr(module, g.__name__)(*_flat(args))
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_generated_module_imports_only_numpy_and_tlaloc_numpy():
    for name in CASES:
        src = tl.source(CASES[name][0]())
        imports = [l for l in src.splitlines() if l.startswith(("import ", "from "))]
        assert imports == ["import numpy as np", "import tlaloc.numpy as tnp", "from tlaloc.numpy import lax"]


def test_naming_scheme_and_grad_comments():
    src = tl.source(tl.grad(gf.mlp_loss, argnums=(0, 1)))
    assert "def dmlp_loss_dw1_w2(w1, w2, x, y):" in src
    assert "w1_bar" in src and "w2_bar" in src
    assert "# grad of: h = np.tanh(x @ w1)" in src
    assert "# golden_functions.py:6: h = np.tanh(x @ w1)" in src
