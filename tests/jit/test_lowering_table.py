"""Every primitive has a StableHLO lowering or is refused by name, with a reason."""
import importlib

import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc._core.primitive import REGISTRY
from tlaloc._render import stablehlo_rules


def _import_everything():
    """The modules that declare primitives (beyond ``import tlaloc``)."""
    for name in ("tlaloc.numpy", "tlaloc.random", "tlaloc.typing", "tlaloc._ad.custom", "tlaloc._ad.remat", "tlaloc.nn",
                 "tlaloc.models", "tlaloc.optim"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_import_everything()          # every primitive any module declares, before the tables are read


def test_every_primitive_lowers_or_is_refused():
    assert stablehlo_rules.unlowered() == []
    assert not set(stablehlo_rules.LOWERINGS) & set(stablehlo_rules.REFUSED)
    for name, prim in REGISTRY.items():
        assert prim.lower is not None, name


@pytest.mark.parametrize("name", sorted(stablehlo_rules.REFUSED))
def test_refusals_name_the_primitive(name):
    if name not in REGISTRY:
        pytest.skip(f"{name} is not declared in this build")
    stablehlo_rules.install()

    class _Node:
        loc = None
    with pytest.raises(tl.NoRuleError, match=f"`{name}`"):
        REGISTRY[name].lower(None, _Node())


def trace_by_einsum(x):
    return tnp.lax.einsum(x, spec="ii->")    # the primitive itself (tnp.einsum takes the diagonal first)


def test_refused_primitive_end_to_end():
    with pytest.raises(tl.NoRuleError, match="no StableHLO lowering rule for `einsum`"):
        tl.jit(trace_by_einsum)(np.ones((3, 3)))
