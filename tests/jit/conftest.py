import pytest

pytest.importorskip("jax", reason="tl.jit's XLA backend needs jax/jaxlib")


def pytest_report_header(config):
    from .test_ad_table import seed
    return f"tlaloc AD table through tl.jit: seed {seed()} (TLALOC_AD_TABLE_SEED={seed()} repeats the selection)"
