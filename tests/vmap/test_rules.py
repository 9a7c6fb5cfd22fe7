"""Every primitive has a batching rule, and each rule agrees with a loop over
examples: each operand batched alone, all batched together, and the batch
axis first or last. Refusals name the primitive.
"""
import numpy as np
import pytest

from tlaloc._core.primitive import REGISTRY
from tlaloc._ad import batching, batching_rules
from tlaloc.errors import NoRuleError

from .harness import assert_close, batch_one
from .rule_cases import CASES, LOOSE, UNBATCHABLE

B = 3


def _draw(gens, rng):
    return [[g(rng) for _ in range(B)] for g in gens]


def _run(name, prim, params, gens, batched, axis=0, seed=0):
    rng = np.random.default_rng(seed)
    draws = _draw(gens, rng)
    operands = [d if b else d[0] for d, b in zip(draws, batched)]
    got, want, _ = batch_one(prim, operands, params, batched, B, axis)
    tol = LOOSE.get(prim, 1e-12)
    assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("label,prim,params,gens", CASES, ids=[c[0] for c in CASES])
def test_rule_matches_a_loop(label, prim, params, gens):
    fixed = UNBATCHABLE.get(label, UNBATCHABLE.get(prim, set()))
    free = [k for k in range(len(gens)) if k not in fixed]
    subsets = [[k in free for k in range(len(gens))]] + [[k == j for k in range(len(gens))] for j in free]
    for batched in subsets:
        _run(label, prim, params, gens, batched)
    # the batch axis last instead of first
    _run(label, prim, params, gens, subsets[0], axis=-1, seed=1)


@pytest.mark.parametrize("label,k", [(lbl, k) for lbl, ks in UNBATCHABLE.items() for k in ks])
def test_unbatchable_operand_is_refused_by_name(label, k):
    label, prim, params, gens = next(c for c in CASES if c[0] == label or c[1] == label)
    with pytest.raises(NoRuleError, match=f"no batching rule for `{prim}`"):
        _run(label, prim, params, gens, [j == k for j in range(len(gens))])


def test_every_primitive_has_a_batching_rule():
    batching.install_rules()          # primitives declared after the rule modules
    missing = sorted(n for n, p in REGISTRY.items() if p.batch is None)
    assert not missing, f"primitives without a batching rule: {missing}"


def test_every_rule_is_exercised_or_its_primitive_is_listed():
    covered = {c[1] for c in CASES}
    # batched only through whole programs (tests/vmap/test_programs.py) or refused
    elsewhere = {"cond", "for_range", "while_loop", "stack_ys", "iota", "arange", "full",
                 "random_bits", "random_normal", "name_axes"}
    elsewhere |= {n for n, p in REGISTRY.items() if getattr(p, "inline_region", None)}   # region calls
    elsewhere |= {n for n, p in REGISTRY.items() if getattr(p.batch, "refused", None)}    # refusals by name
    untested = sorted(set(REGISTRY) - covered - elsewhere)
    assert not untested, f"batching rules without a table case: {untested}"


@pytest.mark.parametrize("name", sorted(batching_rules.PARTIAL))
def test_partial_rules_state_what_they_refuse(name):
    assert REGISTRY[name].batch is not None
    assert batching_rules.PARTIAL[name]


def test_missing_rule_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(REGISTRY["tanh"], "batch", None)
    with pytest.raises(NoRuleError, match="no batching rule for `tanh`"):
        _run("tanh", "tanh", {}, [lambda rng: rng.uniform(size=3)], [True])


def test_negative_control_a_wrong_rule_is_caught(monkeypatch):
    # a "rule" that forgets to shift the reduced axis past the batch axis
    def wrong(args, dims, *, axes, keepdims):
        return REGISTRY["reduce_sum"].bind(args[0], axes=axes, keepdims=keepdims), 0
    monkeypatch.setattr(REGISTRY["reduce_sum"], "batch", wrong)
    with pytest.raises(AssertionError):
        _run("reduce_sum", "reduce_sum", {"axes": (0,), "keepdims": False},
             [lambda rng: rng.uniform(size=(4, 2))], [True])
