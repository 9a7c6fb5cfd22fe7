"""TLALOC_DUMP_SOURCE_DIR never overwrites another function's dump (regression)."""
import numpy as np

import tlaloc as tl


def _make(k):
    def f(x):
        return (x * k).sum() if k else np.sin(x).sum()
    return f


def test_two_functions_with_one_name_get_two_files(tmp_path, monkeypatch):
    monkeypatch.setenv("TLALOC_DUMP_SOURCE_DIR", str(tmp_path))
    a = tl.grad(_make(0))
    b = tl.grad(_make(2.0))
    files = sorted(p.name for p in tmp_path.glob("*.py"))
    assert files == ["df_dx.py", "df_dx_2.py"]
    assert {p.read_text() for p in tmp_path.glob("*.py")} == {tl.source(a), tl.source(b)}
    tl.grad(_make(0))                         # the same source again: no third file
    assert len(list(tmp_path.glob("*.py"))) == 2
