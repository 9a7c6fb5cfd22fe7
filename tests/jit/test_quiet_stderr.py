"""A tl.jit call prints nothing on stderr: jaxlib's INFO lines are silenced (regression)."""
import os
import subprocess
import sys
import textwrap


def test_jit_call_leaves_stderr_empty(tmp_path):
    script = tmp_path / "jit_once.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import tlaloc as tl

        def f(x):
            return (x * 2.0).sum()

        print(tl.jit(f)(np.ones(3)))
    """))
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "6.0"
    assert "PjRt" not in run.stderr and run.stderr.strip() == "", run.stderr
