"""Every primitive has a StableHLO lowering or is refused by name, with a reason."""
import importlib
import pkgutil

import numpy as np
import pytest

import tlaloc as tl
from tlaloc._core.primitive import REGISTRY
from tlaloc._render import stablehlo_rules


def _import_everything():
    for m in pkgutil.walk_packages(tl.__path__, "tlaloc."):
        try:
            importlib.import_module(m.name)
        except Exception:          # optional extras (servers, kernels) may need packages absent here
            pass


def test_every_primitive_lowers_or_is_refused():
    _import_everything()
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


def test_refused_primitive_end_to_end():
    def f(a, b):
        return np.linalg.solve(a, b).sum()

    a = np.eye(3) * 2.0
    with pytest.raises(tl.NoRuleError, match="no StableHLO lowering rule for `solve`"):
        tl.jit(f)(a, np.ones(3))
