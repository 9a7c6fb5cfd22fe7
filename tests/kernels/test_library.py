"""The simulator runs every library kernel to an independent float64 NumPy
oracle (``oracle64``, not our ``reference`` module) within 1e-6 relative to the
scale of each row, on small f32 shapes that include masked tails, ignored labels,
causal rows, a ragged GQA block table, and RMSNorm rows where eps matters
(mean(x²) = eps, = 10·eps, all zero). The kernels' float32 error is at most
2.9e-7 of the row's scale (measured); an RMSNorm that drops eps is off by 0.4 on the
mean(x²) = eps row (and NaN on the zero row): ``test_control_rmsnorm_without_eps_fails``."""
import numpy as np
import pytest

from tlaloc.kernels import library as L
from tlaloc.kernels.library import reference as R
from tlaloc.kernels.sim import simulate

from . import oracle64 as O

RTOL = 1e-6
EPS = float(np.float32(1e-6))        # the RMSNorm kernel's eps, as the f32 constant it embeds


def close(got, want, per_row=False):
    """|got - want| <= RTOL · scale, the scale being max|want| (of each row with ``per_row``:
    rows of very different size, e.g. rstd of an eps row vs an ordinary one, are each held)."""
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert not np.isnan(got).any(), "NaN in the kernel's output"
    w2 = want.reshape(len(want), -1) if per_row else want.reshape(1, -1)
    scale = np.abs(w2).max(-1, keepdims=True)
    err = np.abs(np.asarray(got, np.float64).reshape(w2.shape) - w2)
    worst = (err / np.where(scale > 0, scale, 1.0)).max()           # an all-zero row must be exactly zero
    assert worst <= RTOL, f"error {worst:.3g} of the scale > {RTOL:g}"


def eps_rows(rng, rows, dim):
    """Standard-normal rows, except row 0 scaled to mean(x²) = eps, row 2 all zero, row 3 to 10·eps."""
    x = rng.standard_normal((rows, dim))
    x[0] *= np.sqrt(EPS / np.mean(x[0] ** 2))
    if rows > 2:
        x[2] = 0.0
    if rows > 3:
        x[3] *= np.sqrt(10 * EPS / np.mean(x[3] ** 2))
    return x.astype(np.float32)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("rows,dim,threads", [(3, 100, 64), (2, 64, None), (4, 300, 128)])
def test_rmsnorm_forward_and_backward(rng, rows, dim, threads):
    x = eps_rows(rng, rows, dim)
    w = rng.standard_normal(dim).astype(np.float32)
    g = rng.standard_normal((rows, dim)).astype(np.float32)
    shape = dict(rows=rows, dim=dim, threads=threads) if threads else dict(rows=rows, dim=dim)
    y, rstd = simulate(L.rmsnorm_fwd.specialize(arch="sm_90", **shape), x, w)
    ry, rr = O.rmsnorm(x, w, EPS)
    close(y, ry, per_row=True)
    close(rstd[:, None], rr[:, None], per_row=True)
    rdx, rdw = O.rmsnorm_grads(x, w, g, EPS)
    (dx,) = simulate(L.rmsnorm_bwd_dx.specialize(arch="sm_90", **shape), x, w, rstd, g)
    close(dx, rdx, per_row=True)
    (dw,) = simulate(L.rmsnorm_bwd_dw.specialize(arch="sm_90", rows=rows, dim=dim, threads=64), x, rstd, g)
    close(dw, rdw)


def test_control_rmsnorm_without_eps_fails(rng):
    """The same comparison rejects a forward kernel specialized with eps = 0 (the fault of a dropped eps)."""
    x = eps_rows(rng, 4, 100)[[0, 1, 3]]                     # no zero row: without eps it would be NaN
    w = rng.standard_normal(100).astype(np.float32)
    y, rstd = simulate(L.rmsnorm_fwd.specialize(arch="sm_90", rows=3, dim=100, eps=0.0), x, w)
    ry, rr = O.rmsnorm(x, w, EPS)
    with pytest.raises(AssertionError, match="of the scale"):
        close(y, ry, per_row=True)
    with pytest.raises(AssertionError, match="of the scale"):
        close(rstd[:, None], rr[:, None], per_row=True)


def test_rmsnorm_backward_matches_the_derivative_of_the_forward(rng):
    """The reference backward is the true derivative (central differences in f64)."""
    x = rng.standard_normal((2, 8))
    w = rng.standard_normal(8)
    g = rng.standard_normal((2, 8))
    _, rstd = R.rmsnorm_fwd(x, w, eps=1e-6)
    dx = R.rmsnorm_bwd_dx(x, w, rstd, g)[0]
    eps = 1e-6
    for i, j in [(0, 0), (1, 5)]:
        e = np.zeros_like(x)
        e[i, j] = eps
        num = ((R.rmsnorm_fwd(x + e, w, eps=1e-6)[0] - R.rmsnorm_fwd(x - e, w, eps=1e-6)[0]) * g).sum() / (2 * eps)
        assert abs(num - dx[i, j]) < 1e-6


@pytest.mark.parametrize("tokens,heads,dim,max_pos", [(3, 2, 80, 10), (5, 1, 128, 5)])
def test_rope_is_bit_exact(rng, tokens, heads, dim, max_pos):
    x = rng.standard_normal((tokens, heads, dim)).astype(np.float32)
    ang = np.arange(max_pos)[:, None] * 1e4 ** (-np.arange(dim // 2) / (dim // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = rng.integers(0, max_pos, tokens).astype(np.int32)
    (out,) = simulate(L.rope.specialize(arch="sm_90", tokens=tokens, heads=heads, dim=dim, max_pos=max_pos),
                      x, cos, sin, pos)
    np.testing.assert_array_equal(out, R.rope(x, cos, sin, pos)[0])     # same f32 roundings as NumPy
    close(out, O.rope(x, cos, sin, pos))


@pytest.mark.parametrize("rows,vocab,threads", [(4, 300, 128), (2, 1000, 256)])
def test_cross_entropy_forward_and_backward(rng, rows, vocab, threads):
    z = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
    labels = rng.integers(0, vocab, rows).astype(np.int32)
    labels[1] = -100                                                     # ignored row
    labels[0] = vocab - 1                                                # last column
    shape = dict(rows=rows, vocab=vocab, threads=threads)
    loss, lse = simulate(L.cross_entropy_fwd.specialize(arch="sm_90", **shape), z, labels)
    rl, rlse, rdz = O.cross_entropy(z, labels)
    close(loss, rl)
    close(lse, rlse)
    assert loss[1] == 0.0
    g = rng.standard_normal(rows).astype(np.float32)
    (dz,) = simulate(L.cross_entropy_bwd.specialize(arch="sm_90", **shape), z, labels, lse, g)
    close(dz, rdz * np.float64(g)[:, None])
    assert not dz[1].any()


@pytest.mark.parametrize("batch,heads,seq,head_dim,causal", [(2, 2, 20, 40, False), (1, 2, 20, 40, True),
                                                             (1, 1, 33, 32, True)])
def test_attention(rng, batch, heads, seq, head_dim, causal):
    q, k, v = (rng.standard_normal((batch, heads, seq, head_dim)).astype(np.float32) for _ in range(3))
    spec = L.attention.specialize(arch="sm_90", batch=batch, heads=heads, seq=seq, head_dim=head_dim,
                                  causal=causal)
    (out,) = simulate(spec, q, k, v)
    close(out, O.attention(q, k, v, causal))


PAGED = [  # batch, q_heads, kv_heads, head_dim, num_blocks, block_size, max_blocks, seq_lens, extra
    (3, 4, 2, 64, 12, 4, 5, [1, 17, 9], dict(nwarps=2)),          # GQA 2, ragged, partial pages
    (2, 8, 2, 128, 10, 16, 3, [40, 3], {}),                       # GQA 4, v4 loads
    (2, 2, 2, 32, 8, 3, 6, [7, 16], dict(unroll=3)),              # block size 3: div/rem paging
]


@pytest.mark.parametrize("B,Hq,Hkv,D,NB,BS,MAXB,lens,extra", PAGED)
def test_paged_attention_gqa_ragged(rng, B, Hq, Hkv, D, NB, BS, MAXB, lens, extra):
    q = rng.standard_normal((B, Hq, D)).astype(np.float32)
    kc, vc = (rng.standard_normal((NB, BS, Hkv, D)).astype(np.float32) for _ in range(2))
    tables = rng.permutation(np.arange(1, NB))[:MAXB * B] if (NB - 1) >= MAXB * B else \
        rng.integers(1, NB, MAXB * B)
    tables = tables.reshape(B, MAXB).astype(np.int32)
    for b, n in enumerate(lens):                                   # unused entries point at scratch page 0
        tables[b, -(-n // BS):] = 0
    lens = np.array(lens, np.int32)
    spec = L.paged_attention.specialize(arch="sm_90", batch=B, q_heads=Hq, kv_heads=Hkv, head_dim=D,
                                        num_blocks=NB, block_size=BS, max_blocks=MAXB, **extra)
    (out,) = simulate(spec, q, kc, vc, tables, lens)
    close(out, O.paged_attention(q, kc, vc, tables, lens))


def test_paged_attention_reads_only_live_pages(rng):
    """Poison everything outside the pages the tables name: the result must not change."""
    B, Hq, Hkv, D, NB, BS, MAXB = 2, 4, 1, 32, 9, 4, 3
    q = rng.standard_normal((B, Hq, D)).astype(np.float32)
    kc, vc = (rng.standard_normal((NB, BS, Hkv, D)).astype(np.float32) for _ in range(2))
    tables = np.array([[3, 7, 0], [5, 0, 0]], np.int32)
    lens = np.array([6, 2], np.int32)
    spec = L.paged_attention.specialize(arch="sm_90", batch=B, q_heads=Hq, kv_heads=Hkv, head_dim=D,
                                        num_blocks=NB, block_size=BS, max_blocks=MAXB)
    (clean,) = simulate(spec, q, kc, vc, tables, lens)
    kp, vp = kc.copy(), vc.copy()
    live = {(3, s) for s in range(4)} | {(7, 0), (7, 1), (5, 0), (5, 1)}
    for p in range(NB):
        for s in range(BS):
            if (p, s) not in live:
                kp[p, s], vp[p, s] = np.nan, np.nan
    (poisoned,) = simulate(spec, q, kp, vp, tables, lens)
    np.testing.assert_array_equal(clean, poisoned)


def test_shape_limits_are_refused_by_name():
    from tlaloc.errors import ArgumentError
    with pytest.raises(ArgumentError, match="48 KiB of static shared memory"):
        L.attention.specialize(batch=1, heads=1, seq=8192, head_dim=128)
    with pytest.raises(ValueError, match="head_dim must be a multiple of 32"):
        L.paged_attention.specialize(batch=1, q_heads=2, kv_heads=1, head_dim=48, num_blocks=2, block_size=4,
                                     max_blocks=1)
