"""Suite-wide settings.

Every transformed function called in the tests also runs its DXIR graph in the
reference interpreter and checks that the rendered Python returned the same bits
(TLALOC_CHECK_RENDER=1).
"""
import os

os.environ.setdefault("TLALOC_CHECK_RENDER", "1")


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
