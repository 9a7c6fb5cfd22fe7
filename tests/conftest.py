"""Suite-wide settings.

Every transformed function called in the tests also runs its DXIR graph in the
reference interpreter and checks that the rendered Python returned the same bits
(TLALOC_CHECK_RENDER=1). Engines keep their weights out of the huge-page arena
(TLALOC_HUGE_PAGES=0) unless a test asks for it.
"""
import os

os.environ.setdefault("TLALOC_CHECK_RENDER", "1")
# Engines in the tests keep their weights in the allocator's pages, not in the huge-page arena
# (tlaloc._runtime.host_arena), unless a test asks for it (tests/serving/test_host_arena.py does):
# on the 2-core CI VM each 2 MiB page's first touch cost ~10 ms (SmolLM2 float32's 1.5 GB: 12-15 s
# of system time an engine, against 3 s; session 21), and the values are the same bytes either way.
os.environ.setdefault("TLALOC_HUGE_PAGES", "0")


# Suite-wide order: the multi-minute tests (marked ``slow``: SmolLM2 through the artifact, the
# quantization report, the q4_1 export) start first. pytest-xdist hands tests to its workers
# in collection order, so started last they would leave one worker alone for minutes at the end.
_HEAVY_FILES = ("test_jacobian_nesting.py", "test_second_order_table.py", "test_ad_table.py", "test_hostile.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        if item.get_closest_marker("slow") is not None:
            return 0
        return 1 if item.path.name in _HEAVY_FILES else 2
    items[:] = sorted(items, key=rank)        # stable: the order within each group is kept


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_reference(tmp_path_factory):
    """(package folder, ``reference()``): ``reference()`` gives transformers' reference of
    ``models/smol_reference.py``, computed once per run; under pytest-xdist the workers share it
    through the run's common temporary folder. Call it after the test's own slow work (an
    export), so that a worker waiting for another's computation has done its own meanwhile."""
    from models import smol_reference
    root = smol_reference.smollm2_root()
    base = tmp_path_factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return root, lambda: smol_reference.shared(root, folder)
