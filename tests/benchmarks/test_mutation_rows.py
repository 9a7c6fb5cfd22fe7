"""The mutation check's rows stay applicable: each old text occurs exactly once in src/tlaloc,
and each named test file exists (``benchmarks/mutation_check.py``; the check itself runs outside
the suite). Cheap: reads files only."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "benchmarks" / "mutation_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MC = _module()


def test_every_old_text_occurs_exactly_once():
    MC.check_rows()


@pytest.mark.parametrize("row", MC.MUTATIONS, ids=[m.name for m in MC.MUTATIONS])
def test_row_names_existing_test_files(row):
    assert row.tests, f"{row.name}: no test files"
    for t in row.tests:
        assert (ROOT / t).is_file(), f"{row.name}: {t} does not exist"


def test_at_least_25_distinct_mutations():
    assert len({m.name for m in MC.MUTATIONS}) == len(MC.MUTATIONS) >= 25


def test_control_a_missing_old_text_stops_the_check(tmp_path):
    for m in MC.MUTATIONS:
        target = tmp_path / m.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((ROOT / "src" / "tlaloc" / m.file).read_text())
    first = MC.MUTATIONS[0]
    (tmp_path / first.file).write_text("")
    with pytest.raises(SystemExit, match="found 0 times"):
        MC.check_rows(tmp_path)
