"""Eager entry points: the functions ``tlaloc.numpy.lax`` exports, one per primitive.

Generated derivative code calls ``lax.<primitive>(...)`` on NumPy arrays. Going
through ``Primitive.bind`` costs a scan of the operands for symbolic values and
foreign arrays, then the float-mix check, before the NumPy call. The entry
points here test the common cases with a few type tests and call the same
NumPy code directly; everything else (symbolic values, foreign arrays, Python
scalars alone, containers, mixed dtypes) goes to ``bind`` unchanged. The NumPy
code run is the same as ``bind`` runs, so the bits are the same.

Each entry is chosen where the primitive is declared (``Primitive.eager``):

* ``elementwise(prim, raw)``: an impl wrapped by ``refuse_float_mix``; operands
  of one dtype, or an array and a Python number, skip the check (there is no
  mix to refuse and no weak float to convert: NumPy's own floats apply NEP 50).
* ``contraction(prim, fn)``: operands all of one NumPy float dtype skip the check
  and the bfloat16 handling.
* ``unary(prim)``: one array operand (and params) goes to ``impl``.
* ``like_shape(prim)``: ``sum_to``/``broadcast_like`` return ``x`` where the shapes agree.
* ``generic(prim)`` (the default): arrays and Python numbers go to ``impl``.
"""
from __future__ import annotations

import numpy as np

_ND = np.ndarray
# concrete operands bind passes to impl as they are: arrays and NumPy scalars (``bind`` treats
# both alike; a 0-d result such as a sum comes back as a NumPy scalar)
_ARRAY = frozenset({np.ndarray, np.float64, np.float32, np.float16, np.int64, np.int32, np.bool_})
# dtypes for which NumPy applies NEP 50 itself (a Python float adopts the array's float type)
_NATIVE = frozenset(np.dtype(d) for d in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                          np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))
_FLOATS = frozenset(np.dtype(d) for d in (np.float16, np.float32, np.float64))


def entry(prim):
    """The function ``lax.<prim.name>``: ``prim.eager`` if declared, else ``generic(prim)``."""
    fn = prim.eager or generic(prim)
    fn.__name__ = prim.name
    fn.__qualname__ = prim.name
    fn.__doc__ = f"Primitive ``{prim.name}`` (eager on NumPy arrays, a DXIR node on symbolic values)."
    return fn


def generic(prim):
    impl, bind = prim.impl, prim.bind

    def eager(*args, **params):
        array = False
        for a in args:
            t = type(a)
            if t in _ARRAY:
                array = True
            elif t is not float and t is not int and t is not bool:
                return bind(*args, **params)
        if array:            # bind would call impl, with nothing to fold
            return impl(*args, **params)
        return bind(*args, **params)
    return eager


def unary(prim):
    impl, bind = prim.impl, prim.bind

    def eager(x, **params):
        if type(x) in _ARRAY:
            return impl(x, **params)
        return bind(x, **params)
    return eager


def like_shape(prim):
    """``sum_to``/``broadcast_like``: ``x`` itself where it has ``like``'s shape and dtype (as
    ``impl`` returns)."""
    impl, bind = prim.impl, prim.bind

    def eager(x, like):
        if type(x) is _ND and type(like) is _ND:
            if x.shape == like.shape and x.dtype is like.dtype:
                return x
            return impl(x, like)
        return bind(x, like)
    return eager


def elementwise(prim, raw):
    """``prim.impl`` is ``refuse_float_mix(raw)``, with two operands."""
    bind = prim.bind

    def eager(x, y):
        tx, ty = type(x), type(y)
        if tx in _ARRAY:
            if ty in _ARRAY:
                if x.dtype is y.dtype:
                    return raw(x, y)
            elif (ty is float or ty is int) and x.dtype in _NATIVE:
                return raw(x, y)
        elif ty in _ARRAY and (tx is float or tx is int) and y.dtype in _NATIVE:
            return raw(x, y)
        return bind(x, y)
    return eager


def contraction(prim, fn):
    """``prim.impl`` is ``_contraction(fn)``: ``fn`` on NumPy float arrays of one dtype."""
    bind = prim.bind

    def eager(*args):
        dt = None
        for a in args:
            if type(a) not in _ARRAY:
                return bind(*args)
            if dt is None:
                dt = a.dtype
                if dt not in _FLOATS:
                    return bind(*args)
            elif a.dtype is not dt:
                return bind(*args)
        return fn(*args)
    return eager
