"""The autograd-examples harness (``benchmarks/autograd_examples.py``) on two small programs
of our own in autograd's style: the port changes imports only, agreeing gradients are
reported as such, a refused port is reported with its error, and a differing gradient as
wrong (a negative control on ``compare``)."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import autograd_examples as harness  # noqa: E402

AGREES = '''"""A quadratic fitted by gradient descent (autograd: the word stays in this docstring)."""
import autograd.numpy as np
import autograd.numpy.random as npr
from autograd import grad

rs = npr.RandomState(0)
x, y = rs.randn(20), rs.randn(20)


def loss(w):
    return np.mean((w[0] * x ** 2 + w[1] - y) ** 2)   # autograd in a comment stays too


if __name__ == "__main__":
    w = np.zeros(2)
    for _ in range(3):
        w = w - 0.1 * grad(loss)(w)
'''

REFUSED = '''import autograd.numpy as np
from autograd import grad
from autograd.tracer import trace


if __name__ == "__main__":
    print(grad(np.tanh)(0.5))
'''


def test_the_port_changes_module_names_only():
    ported = harness.port_source(AGREES)
    assert "import numpy as np" in ported and "import numpy.random as npr" in ported
    assert "from tlaloc import grad" in ported
    assert "(autograd: the word stays in this docstring)" in ported and "# autograd in a comment" in ported
    assert ported.count("\n") == AGREES.count("\n")
    assert harness.port_source("import autograd.scipy.stats.multivariate_normal as mvn\n") == \
        "from scipy.stats import multivariate_normal as mvn\n"
    assert harness.port_source("import autograd.scipy.signal\nc = autograd.scipy.signal.convolve\n") == \
        "import tlaloc.scipy.signal\nc = tlaloc.scipy.signal.convolve\n"


def test_compare_reports_a_differing_gradient_as_wrong():
    want = [[np.array([1.0, -2.0]), np.array(1e-20)]]
    assert harness.compare([[np.array([1.0, -2.0]), np.array(3e-21)]], want)[0] == "agree"   # rounding-level
    status, err = harness.compare([[np.array([1.0, -2.1]), np.array(1e-20)]], want)
    assert status == "agree" and err == pytest.approx(0.05)          # reported; main() applies --rtol
    assert harness.compare([[np.array([1.0, -2.0])]], want)[0] == "wrong"
    assert harness.compare([], want)[0] == "wrong"


def test_end_to_end_on_two_programs(tmp_path, capsys):
    ex = tmp_path / "autograd" / "examples"
    (ex / "fluidsim").mkdir(parents=True)
    (ex / "fitting.py").write_text(AGREES)
    (ex / "tracing.py").write_text(REFUSED)
    code = harness.main(["--autograd-dir", str(tmp_path / "autograd"), "--calls", "2",
                         "--keep", str(tmp_path / "work")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| fitting | agree |" in out
    assert "| tracing | refused | ModuleNotFoundError: No module named 'tlaloc.tracer'" in out
    assert "1 of 2 agree" in out and "0 wrong" in out
