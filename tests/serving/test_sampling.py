"""Sampling inside the programs: the traced sampler against the eager reference, compiled, and end to end."""
import numpy as np
import pytest

from tlaloc.serving.export.reference import sample_next
from tlaloc.serving.export.sampling import prefix_sum, sample_tokens

SETTINGS = [(0.0, 0, 1.0), (0.7, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.9, 20, 0.5), (2.0, 1, 1.0)]


class _Fixed:
    def __init__(self, u):
        self.u = u

    def random(self):
        return self.u


def _inputs(seed, V=300):
    rng = np.random.default_rng(seed)
    n = len(SETTINGS)
    logits = (3 * rng.standard_normal((n, V))).astype(np.float32)
    temperature = np.array([s[0] for s in SETTINGS], np.float32)
    top_k = np.array([s[1] for s in SETTINGS], np.int32)
    top_p = np.array([s[2] for s in SETTINGS], np.float32)
    uniforms = rng.random(n).astype(np.float32)
    return logits, temperature, top_k, top_p, uniforms


@pytest.mark.parametrize("seed", range(8))
def test_traced_sampler_equals_eager_reference(seed):
    logits, temperature, top_k, top_p, uniforms = _inputs(seed)
    got = np.asarray(sample_tokens(logits, temperature, top_k, top_p, uniforms))
    want = [sample_next(logits[r], _Fixed(float(uniforms[r])), float(temperature[r]), int(top_k[r]) or None,
                        float(top_p[r]) if top_p[r] < 1 else None) for r in range(len(SETTINGS))]
    assert got.tolist() == want


def test_compiled_sampler_equals_eager():
    from tlaloc.serving.runtime.device import Program
    from tlaloc.serving.export.programs import Slot, lower
    args = _inputs(0)
    slots = [Slot(f"a{k}", "x", a.dtype, a.shape) for k, a in enumerate(args)]
    program = lower(sample_tokens, slots, "sampler")
    exe = Program(program.text, "cpu", [s.name for s in slots], [(s.dtype, s.shape) for s in slots], fast_compile=True)
    for seed in range(4):
        args = _inputs(seed)
        assert np.asarray(exe(*args)[0]).tolist() == np.asarray(sample_tokens(*args)).tolist()
    greedy = list(args)
    greedy[1] = np.zeros_like(greedy[1])                                  # all rows greedy: the other branch
    assert np.asarray(exe(*greedy)[0]).tolist() == np.argmax(args[0], -1).tolist()


@pytest.mark.parametrize("n", [1, 31, 32, 33, 300, 5000])
def test_prefix_sum(n):
    x = np.random.default_rng(n).random((3, n)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(prefix_sum(x)), np.cumsum(x.astype(np.float64), -1), rtol=1e-5)


def test_seeded_sampling_equals_the_eager_reference(engine, tiny):
    """Engine.generate(seed=s) draws the same uniforms as tlaloc.serving.export.reference (seeded (s, prompt index))."""
    import tlaloc.models as tm
    from tlaloc.serving.export.reference import generate
    from .fixtures import PROMPTS
    eng = engine("llama")
    kwargs = dict(max_new_tokens=16, temperature=0.8, top_k=40, top_p=0.9, seed=7, stop=[])
    got = [r.token_ids for r in eng.generate(PROMPTS, **kwargs)]
    assert got == [r.token_ids for r in eng.generate(PROMPTS, **kwargs)]          # reproducible
    assert got[2] == eng.generate([PROMPTS[0], PROMPTS[1], PROMPTS[2]], **kwargs)[2].token_ids
    want = [r.token_ids for r in generate(tm.load(tiny("llama")[1]), PROMPTS, **kwargs)]
    assert got == want
    greedy = [r.token_ids for r in eng.generate(PROMPTS, max_new_tokens=16, stop=[])]
    assert got != greedy                                                          # it did sample


def test_seeded_request_does_not_depend_on_its_batch(engine):
    from .fixtures import PROMPTS
    eng = engine("llama")
    alone = eng.generate([PROMPTS[1]], max_new_tokens=12, temperature=1.0, seed=3, stop=[])[0].token_ids
    rid = eng.submit(PROMPTS[1], max_new_tokens=12, temperature=1.0, seed=3)
    other = eng.submit(PROMPTS[2], max_new_tokens=12, temperature=1.0, seed=99)
    out = {rid: [], other: []}
    while eng.has_work():
        for ev in eng.step():
            out[ev.request_id].extend(ev.token_ids)
    assert out[rid] == alone


def test_greedy_ids_is_numpys_argmax_compiled_and_eager():
    """Ties (lowest id), NaN (its first id), all -inf, one-hot rows; compiled and eager against
    np.argmax. Control: a row whose tie is broken the other way is seen."""
    from tlaloc.serving.export.programs import Slot, lower
    from tlaloc.serving.export.sampling import greedy_ids
    from tlaloc.serving.runtime.device import Program
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 300)).astype(np.float32)
    x[1, [7, 200]] = 9.0                                                  # a tie: 7 wins
    x[2, [250, 40]] = np.nan                                              # NaN: the first one, 40
    x[3] = -np.inf
    x[4] = 0.0
    x[4, 299] = 1.0
    x[5] = np.round(x[5])                                                 # many ties at the top
    want = np.argmax(x, axis=-1)
    slot = [Slot("logits", "x", x.dtype, x.shape)]
    exe = Program(lower(lambda lg: [greedy_ids(lg)], slot, "greedy").text, "cpu", ["logits"], [(x.dtype, x.shape)],
                  fast_compile=True)
    got = np.asarray(exe(x)[0])
    assert got.dtype == np.int32 and got.tolist() == want.tolist()
    assert np.asarray(greedy_ids(x)).tolist() == want.tolist()
    flipped = x.copy()
    flipped[1, 7] = 8.0
    assert np.asarray(exe(flipped)[0])[1] == 200 != want[1]
