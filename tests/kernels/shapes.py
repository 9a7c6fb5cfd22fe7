"""Small specializations of every library kernel, shared by the kernel tests."""
from tlaloc.kernels import library as L

SMALL = [  # (template, shape kwargs)
    (L.rmsnorm_fwd, dict(rows=3, dim=100, threads=64)),
    (L.rmsnorm_fwd, dict(rows=2, dim=64)),
    (L.rmsnorm_bwd_dx, dict(rows=3, dim=100, threads=64)),
    (L.rmsnorm_bwd_dw, dict(rows=5, dim=100, threads=64)),
    (L.rope, dict(tokens=3, heads=2, dim=80, max_pos=10)),
    (L.cross_entropy_fwd, dict(rows=4, vocab=300, threads=128)),
    (L.cross_entropy_bwd, dict(rows=4, vocab=300, threads=128)),
    (L.attention, dict(batch=2, heads=2, seq=20, head_dim=40)),
    (L.attention, dict(batch=1, heads=2, seq=20, head_dim=40, causal=True)),
    (L.paged_attention, dict(batch=3, q_heads=4, kv_heads=2, head_dim=64, num_blocks=12, block_size=4,
                             max_blocks=5, nwarps=2)),
    (L.paged_attention, dict(batch=2, q_heads=8, kv_heads=2, head_dim=128, num_blocks=10, block_size=16,
                             max_blocks=3)),
    (L.paged_attention, dict(batch=2, q_heads=2, kv_heads=2, head_dim=32, num_blocks=8, block_size=3,
                             max_blocks=6, unroll=3)),
]


def ids():
    return [f"{t.name}-{'-'.join(f'{k}{v}' for k, v in s.items())}" for t, s in SMALL]
