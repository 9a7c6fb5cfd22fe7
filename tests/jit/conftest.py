import pytest

pytest.importorskip("jax", reason="tl.jit's XLA backend needs jax/jaxlib")
