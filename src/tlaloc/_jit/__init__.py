"""``tl.jit``: DXIR → specialise → StableHLO → PJRT."""
