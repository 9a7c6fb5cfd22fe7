"""The sampler against transformers' logits warpers (an oracle outside tlaloc).

transformers samples with ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and
``TopPLogitsWarper`` applied in that order, then ``softmax`` and a multinomial draw.
Here the warpers run in float64 and give the filtered distribution ``q`` (V,).

- Exact, where both are deterministic: our samplers are inverse-CDF samplers, so on
  a grid of uniforms ``u`` each must return the token whose interval of ``q``'s
  cumulative mass (best token first) holds ``u``; grid points within 1e-5 of an
  interval end are skipped (float32 rounding may put them on either side).
- Statistical, as the serving runtime draws: ``N`` seeded uniforms
  (``default_rng(seed)``), counts per token against ``N·q`` with Pearson's
  chi-square. The test rejects at p < ALPHA = 1e-3, so a correct sampler fails it
  with probability 1e-3 per (setting, seed); the seeds are fixed, so the outcome is
  deterministic. A negative control shows a temperature 5% off is rejected.

Ties: ``TopKLogitsWarper`` keeps every token tied with the k-th largest, while ours
keeps exactly k (the lower id wins a tie); the logits here have no ties, except in the
greedy test, where both take the first (lowest-id) maximum.
"""
import numpy as np
import pytest

from tlaloc.serving.export.reference import sample_next
from tlaloc.serving.export.sampling import sample_tokens

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 64
ALPHA = 1e-3
# (temperature, top_k (0: off), top_p (1: off))
SETTINGS = [(0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8), (0.9, 20, 0.5), (2.0, 10, 0.9), (0.5, 3, 0.95),
            (1.0, 1, 1.0), (1.0, 0, 1e-3)]


def _logits(seed=0):
    return (2.0 * np.random.default_rng(seed).standard_normal(V)).astype(np.float32)


def hf_distribution(logits, temperature, top_k, top_p):
    """q (V,) float64: transformers' warpers in generate's order, then softmax."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    scores = torch.tensor(logits, dtype=torch.float64)[None]
    warpers = [TemperatureLogitsWarper(temperature)]
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    for w in warpers:
        scores = w(None, scores)
    return torch.softmax(scores, -1)[0].numpy()


def _ours(logits, setting, uniforms):
    """sample_tokens on one row per uniform (the compiled sampler's program)."""
    t, k, p = setting
    n = len(uniforms)
    return np.asarray(sample_tokens(np.repeat(logits[None], n, 0), np.full(n, t, np.float32),
                                    np.full(n, k, np.int32), np.full(n, p, np.float32),
                                    np.asarray(uniforms, np.float32)))


class _Fixed:
    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


def _eager(logits, setting, uniforms):
    t, k, p = setting
    return np.array([sample_next(logits, _Fixed(float(u)), t, k or None, p if p < 1 else None) for u in uniforms])


def _inverse_cdf(q, uniforms):
    """transformers' q sampled by inverse CDF, best token first (ids of equal q: lower first)."""
    order = np.argsort(-q, kind="stable")
    ends = np.cumsum(q[order])
    return order[np.minimum(np.searchsorted(ends, uniforms, side="right"), len(order) - 1)], ends


@pytest.mark.parametrize("sampler", [_ours, _eager], ids=["sample_tokens", "sample_next"])
@pytest.mark.parametrize("setting", SETTINGS, ids=[f"t{t}-k{k}-p{p}" for t, k, p in SETTINGS])
def test_inverse_cdf_equals_transformers_warpers(setting, sampler):
    logits = _logits()
    q = hf_distribution(logits, *setting)
    u = (np.arange(4096) + 0.5) / 4096
    want, ends = _inverse_cdf(q, u)
    near = np.min(np.abs(u[:, None] - ends[None, :]), axis=1) < 1e-5
    got = sampler(logits, setting, u)
    assert np.array_equal(got[~near], want[~near]), f"{setting}: first mismatch at u={u[~near][got[~near] != want[~near]][:3]}"
    assert set(np.unique(got)) <= set(np.flatnonzero(q > 0)), "a token transformers filters out was drawn"


def test_top_p_precondition_no_boundary_is_borderline():
    """The exact test is well posed: no cumulative mass lies within 1e-4 of a top_p cut."""
    logits = _logits()
    for t, k, p in SETTINGS:
        if p < 1.0:
            full = hf_distribution(logits, t, k, 1.0)
            ends = np.cumsum(np.sort(full)[::-1])
            assert np.min(np.abs(ends - p)) > 1e-4, (t, k, p)


def _chi_square_p(tokens, q):
    """Pearson's chi-square p-value of the draws against q (bins of expected count < 5 pooled)."""
    from scipy.stats import chisquare
    n = len(tokens)
    counts = np.bincount(tokens, minlength=len(q)).astype(np.float64)
    assert counts[q == 0].sum() == 0, "a filtered token was drawn"
    expected = n * q
    big = expected >= 5
    obs = np.append(counts[big], counts[~big & (q > 0)].sum())
    exp = np.append(expected[big], expected[~big & (q > 0)].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(exp) < 2:
        return 1.0
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("setting", SETTINGS[:6], ids=[f"t{t}-k{k}-p{p}" for t, k, p in SETTINGS[:6]])
def test_seeded_draws_follow_transformers_distribution(setting, seed):
    """20,000 draws of the runtime's seeded uniforms: chi-square against transformers' q at ALPHA."""
    logits = _logits(seed)
    u = np.random.default_rng(seed).random(20000)
    p = _chi_square_p(_ours(logits, setting, u), hf_distribution(logits, *setting))
    assert p >= ALPHA, f"{setting} seed {seed}: chi-square p = {p:.3g} < {ALPHA}"


def test_control_chi_square_rejects_a_temperature_5_percent_off():
    logits = _logits(0)
    u = np.random.default_rng(0).random(20000)
    drawn = _ours(logits, (1.05 * 0.7, 0, 1.0), u)
    assert _chi_square_p(drawn, hf_distribution(logits, 0.7, 0, 1.0)) < ALPHA


def test_top_p_before_top_k_is_another_distribution_here():
    """Well-posedness: for this setting top-p applied before top-k gives another q, so the exact
    test sees a sampler that swaps the order (the mutation check applies that fault to src)."""
    logits = _logits()
    t, k, p = 0.9, 20, 0.5
    swapped = hf_distribution(logits, t, 0, p)
    swapped = np.where(np.argsort(np.argsort(-swapped)) < k, swapped, 0.0)
    swapped /= swapped.sum()
    assert not np.allclose(swapped, hf_distribution(logits, t, k, p), atol=1e-3)


def test_greedy_equals_torch_argmax_with_ties():
    logits = np.array([[0.5, 2.0, 2.0, -1.0], [3.0, 3.0, 3.0, 3.0], [-1.0, -2.0, 5.0, 5.0]], np.float32)
    zeros = np.zeros(3, np.float32)
    got = np.asarray(sample_tokens(logits, zeros, np.zeros(3, np.int32), np.ones(3, np.float32), zeros))
    assert got.tolist() == torch.argmax(torch.tensor(logits), -1).tolist() == [1, 0, 2]
