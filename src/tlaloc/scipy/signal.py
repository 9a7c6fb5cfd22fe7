"""``tlaloc.scipy.signal``: N-dimensional convolution, differentiable.

``convolve(A, B, mode=...)`` is ``scipy.signal.convolve`` (every axis convolved;
SciPy's positional ``convolve(in1, in2, mode, method)`` works too);
with ``axes=`` and ``dot_axes=`` it is autograd's extension
(``autograd.scipy.signal.convolve``), which convnets use to convolve over the
image axes while contracting the channel axes::

    # inputs (N, C_in, H, W), filters (C_in, C_out, kh, kw) -> (N, C_out, H-kh+1, W-kw+1)
    convolve(inputs, filters, axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode="valid")

Along each convolved pair of axes (sizes ``n_a``, ``n_b``) the full convolution is
``c[k] = sum_m A[m] B[k - m]`` for ``k < n_a + n_b - 1``; ``mode="valid"`` keeps the
``|n_a - n_b| + 1`` entries where one array lies inside the other and ``"same"`` the
``n_a`` entries centred on the full result (starting at ``(n_b - 1) // 2``), as SciPy
does. The result's axes are A's remaining axes, then B's, then the convolved ones.

It is written with ``tlaloc.numpy`` (a zero pad, one slice per position of the
smaller array's convolved axes, and ``einsum`` over the dot axes), so it runs on
NumPy arrays eagerly and differentiates, forward and reverse, like any other code;
there is no separate derivative rule to get wrong.
"""
from __future__ import annotations

import itertools
import string

import numpy as _np

from .. import numpy as tnp
from ..errors import ArgumentError, ShapeError

__all__ = ["convolve"]

_MODES = ("full", "valid", "same")


def convolve(A, B, axes=None, dot_axes=None, mode="full", method="auto"):
    """N-dimensional convolution of ``A`` and ``B``, contracting ``dot_axes``.

    Args:
      A, B: arrays of the same floating dtype.
      axes: ``(axes_of_A, axes_of_B)``, equally long, convolved pairwise; default every
        axis of both (which then need the same rank), as ``scipy.signal.convolve``.
      dot_axes: ``(axes_of_A, axes_of_B)`` summed over in pairs (an inner product);
        default none.
      mode: ``"full"``, ``"valid"`` or ``"same"`` (sizes as above).
      method: accepted for SciPy's signature; the result does not depend on it.

    Returns:
      An array of shape ``A's other axes + B's other axes + (convolved sizes)``.

    Raises:
      ArgumentError: an unknown mode, axes lists of different lengths, axes out of range
        or used twice, dot axes of different sizes, or (``"valid"``) neither array at
        least as large as the other along every convolved axis.
    """
    if isinstance(axes, str):              # SciPy's positional order: convolve(in1, in2, mode, method)
        axes, dot_axes, mode, method = None, None, axes, dot_axes if isinstance(dot_axes, str) else method
    if mode not in _MODES:
        raise ArgumentError(f"convolve: mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
    a_shape, b_shape = _static_shape(A, "A"), _static_shape(B, "B")
    if axes is None:
        if len(a_shape) != len(b_shape):
            raise ArgumentError(f"convolve: A has {len(a_shape)} axes and B {len(b_shape)}; without axes= "
                                f"every axis is convolved, so they must have the same number")
        axes = (range(len(a_shape)), range(len(b_shape)))
    conv_a, conv_b = (_axes(ax, shape, f"axes[{i}]") for i, (ax, shape) in enumerate(zip(axes, (a_shape, b_shape))))
    dot_a, dot_b = ((), ()) if dot_axes is None else (
        _axes(ax, shape, f"dot_axes[{i}]") for i, (ax, shape) in enumerate(zip(dot_axes, (a_shape, b_shape))))
    if len(conv_a) != len(conv_b) or len(dot_a) != len(dot_b):
        raise ArgumentError(f"convolve: axes and dot_axes pair A's axes with B's, so each pair of lists must "
                            f"be equally long; got axes={list(conv_a)}, {list(conv_b)} and "
                            f"dot_axes={list(dot_a)}, {list(dot_b)}")
    for name, shape, own in (("A", a_shape, conv_a + dot_a), ("B", b_shape, conv_b + dot_b)):
        if len(set(own)) != len(own):
            raise ArgumentError(f"convolve: an axis of {name} appears twice in axes/dot_axes ({list(own)})")
    for i, j in zip(dot_a, dot_b):
        if a_shape[i] != b_shape[j]:
            raise ArgumentError(f"convolve: dot axis {i} of A has size {a_shape[i]} but dot axis {j} of B has "
                                f"size {b_shape[j]}; contracted axes must match")
    na, nb = [a_shape[i] for i in conv_a], [b_shape[j] for j in conv_b]
    if mode == "valid" and not (all(x >= y for x, y in zip(na, nb)) or all(y >= x for x, y in zip(na, nb))):
        raise ArgumentError(f"convolve: mode='valid' needs one array at least as large as the other along "
                            f"every convolved axis; the sizes are A {na} and B {nb}")
    starts = [_start(x, y, mode) for x, y in zip(na, nb)]
    sizes = [_size(x, y, mode) for x, y in zip(na, nb)]
    ignore_a = [i for i in range(len(a_shape)) if i not in conv_a + dot_a]
    ignore_b = [j for j in range(len(b_shape)) if j not in conv_b + dot_b]
    # convolution commutes: loop over the positions of the array with fewer of them
    if _np.prod(na) <= _np.prod(nb):
        return _sum_of_shifts(A, conv_a, dot_a, B, conv_b, dot_b, na, nb, starts, sizes, ignore_a, ignore_b, False)
    return _sum_of_shifts(B, conv_b, dot_b, A, conv_a, dot_a, nb, na, starts, sizes, ignore_b, ignore_a, True)


def _sum_of_shifts(small, conv_s, dot_s, big, conv_g, dot_g, ns, ng, starts, sizes, ignore_s, ignore_g, swapped):
    """``out[k] = sum_m small[m] big[k + start - m]`` over the positions m of ``small``'s
    convolved axes; ``big`` is zero-padded so that every shift is one plain slice."""
    pad = [(0, 0)] * len(_static_shape(big, "B"))
    for ax, n in zip(conv_g, ns):
        pad[ax] = (n - 1, n - 1)
    padded = tnp.pad(big, pad) if any(p != (0, 0) for p in pad) else big
    letters = iter(string.ascii_letters)
    s_sub = [next(letters) for _ in range(len(_static_shape(small, "A")))]
    g_sub = [next(letters) for _ in range(len(pad))]
    for i, j in zip(dot_s, dot_g):
        g_sub[j] = s_sub[i]
    out_sub = ([s_sub[i] for i in ignore_s], [g_sub[j] for j in ignore_g])
    out_sub = out_sub[::-1] if swapped else out_sub               # A's axes first, then B's
    out_sub = out_sub[0] + out_sub[1] + [g_sub[j] for j in conv_g]
    kept_s = [i for i in range(len(s_sub)) if i not in conv_s]
    spec = f"{''.join(s_sub[i] for i in kept_s)},{''.join(g_sub)}->{''.join(out_sub)}"
    total = None
    for m in itertools.product(*[range(n) for n in ns]):
        pick = [slice(None)] * len(s_sub)
        for ax, mi in zip(conv_s, m):
            pick[ax] = mi
        window = [slice(None)] * len(pad)
        for ax, mi, n, start, size in zip(conv_g, m, ns, starts, sizes):
            lo = start - mi + n - 1                                  # index of big[start - m] in padded
            window[ax] = slice(lo, lo + size)
        term = tnp.einsum(spec, small[tuple(pick)], padded[tuple(window)])
        total = term if total is None else total + term
    return total


def _start(na, nb, mode):
    """Where the kept part of the full convolution starts along one axis."""
    if mode == "full":
        return 0
    if mode == "valid":
        return min(na, nb) - 1
    return (nb - 1) // 2


def _size(na, nb, mode):
    if mode == "full":
        return na + nb - 1
    if mode == "valid":
        return abs(na - nb) + 1
    return na


def _static_shape(x, name):
    aval = getattr(x, "aval", None)
    if aval is None:
        return tuple(_np.shape(x))
    if aval.shape is None or any(type(d) is not int for d in aval.shape):
        raise ShapeError(f"convolve: the shape of {name} is not known yet")
    return tuple(aval.shape)


def _axes(ax, shape, what):
    out = []
    for a in ax:
        if not isinstance(a, (int, _np.integer)) or not -len(shape) <= a < len(shape):
            raise ArgumentError(f"convolve: {what} must hold axis numbers of an array with {len(shape)} axes, "
                                f"got {list(ax)}")
        out.append(int(a) % len(shape))
    return tuple(out)
