"""SGD (momentum, Nesterov), Adam, AdamW and RMSprop with PyTorch's update formulas.

Each optimizer is a frozen dataclass of hyperparameters with two pure methods:

    state = opt.init(params)
    params, state = opt.update(params, grads, state)

``params`` and ``grads`` are pytrees of the same structure (a ``tl.nn``
module and its gradients); the state is a pytree too (moments with the
params' structure and a step ``count``), so it checkpoints and compiles like
the model. ``lr`` is a float or a schedule (``tl.optim.cosine_with_warmup``
...), called with the number of earlier updates.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional, Union

import numpy as np

from .. import _pytree
from .. import numpy as tnp
from ..errors import ArgumentError
from ._common import flatten_like, leaves_of, like, lr_at, next_count, power, step_number, zeros_tree

LR = Union[float, Callable]
_frozen = dataclasses.dataclass(frozen=True)


def _new_count():
    return np.zeros((), np.int32)


def _check(name, value, low=0.0, high=None, high_open=False, who="optimizer"):
    """Refuse a hyperparameter outside ``[low, high]`` (``[low, high)``), NaN, or not a real number."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = low <= v and (high is None or (v < high if high_open else v <= high)) and math.isfinite(v)
    if not ok:
        upper = "inf)" if high is None else (f"{high})" if high_open else f"{high}]")
        raise ArgumentError(f"{who}: {name} must be a finite real number in [{low}, {upper}, got {value!r}")


def _check_lr(lr, who):
    """``lr``: a schedule (a callable) or a finite number >= 0 (a negative lr would ascend the loss)."""
    if not callable(lr):
        _check("lr", lr, who=who)


def _check_state(state, cls, who):
    if not isinstance(state, cls):
        raise ArgumentError(f"{who}.update: state must be the {cls.__name__} made by {who}.init(params), got "
                            f"{type(state).__name__}")


@_frozen
class SGDState:
    """``count``: int32 ``()``; ``momentum``: params-shaped buffers, or None without momentum."""
    count: Any
    momentum: Any


@_frozen
class SGD:
    """PyTorch's ``torch.optim.SGD``::

        g = grad + weight_decay · p
        buf = g                        (first step)
        buf = momentum · buf + (1 - dampening) · g
        g = g + momentum · buf         (nesterov)   or   g = buf
        p = p - lr · g
    """
    lr: LR = 1e-3
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self):
        _check_lr(self.lr, "SGD")
        _check("momentum", self.momentum, who="SGD")
        _check("dampening", self.dampening, 0.0, 1.0, who="SGD")
        _check("weight_decay", self.weight_decay, who="SGD")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):        # numbers by now
            raise ArgumentError(f"SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got "
                                f"momentum={self.momentum}, dampening={self.dampening}; pass e.g. "
                                f"SGD(lr, momentum=0.9, nesterov=True)")

    def init(self, params) -> SGDState:
        return SGDState(_new_count(), zeros_tree(params) if self.momentum != 0 else None)

    def update(self, params, grads, state: SGDState):
        _check_state(state, SGDState, "SGD")
        ps, gs, tree = flatten_like(params, grads, "SGD")
        bufs = leaves_of(state.momentum, tree, "SGD", "momentum", ps) if self.momentum != 0 else [None] * len(ps)
        lr = lr_at(self.lr, state.count)
        first = tnp.equal(state.count, 0)
        new_p, new_b = [], []
        for p, g, buf in zip(ps, gs, bufs):
            if self.weight_decay != 0:
                g = g + self.weight_decay * p
            if self.momentum != 0:
                buf = tnp.where(first, g, self.momentum * buf + (1.0 - self.dampening) * g)
                g = g + self.momentum * buf if self.nesterov else buf
            new_p.append(p - like(lr, p) * g)
            new_b.append(buf)
        momentum = _pytree.unflatten(tree, new_b) if self.momentum != 0 else None
        return _pytree.unflatten(tree, new_p), SGDState(next_count(state.count), momentum)


@_frozen
class AdamState:
    """``count``: int32 ``()``; ``mu``, ``nu``: first and second moments (params' structure)."""
    count: Any
    mu: Any
    nu: Any


@_frozen
class Adam:
    """PyTorch's ``torch.optim.Adam`` (``amsgrad=False``)::

        g = grad + weight_decay · p                    (Adam: L2 in the gradient)
        p = p · (1 - lr · weight_decay)                (AdamW: decoupled, instead)
        m = m + (1 - β1) · (g - m)
        v = β2 · v + (1 - β2) · g²
        p = p - (lr / (1 - β1ᵗ)) · m / (√v / √(1 - β2ᵗ) + eps)

    ``mask`` (optional, a function of params returning a pytree of bools with
    params' structure) limits weight decay to the leaves marked True.
    """
    lr: LR = 1e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    mask: Optional[Callable] = None

    def __post_init__(self):
        who = type(self).__name__
        _check_lr(self.lr, who)
        _check("b1", self.b1, 0.0, 1.0, high_open=True, who=who)
        _check("b2", self.b2, 0.0, 1.0, high_open=True, who=who)
        _check("eps", self.eps, who=who)
        _check("weight_decay", self.weight_decay, who=who)

    @property
    def name(self) -> str:
        return type(self).__name__

    def init(self, params) -> AdamState:
        return AdamState(_new_count(), zeros_tree(params), zeros_tree(params))

    def update(self, params, grads, state: AdamState):
        _check_state(state, AdamState, self.name)
        ps, gs, tree = flatten_like(params, grads, self.name)
        ms = leaves_of(state.mu, tree, self.name, "mu", ps)
        vs = leaves_of(state.nu, tree, self.name, "nu", ps)
        decay = [True] * len(ps) if self.mask is None else \
            [bool(x) for x in leaves_of(self.mask(params), tree, self.name, "mask")]
        lr = lr_at(self.lr, state.count)
        t = next_count(state.count)
        tp = step_number(t)                                   # a Python int when eager
        bc1 = 1.0 - power(self.b1, tp)
        bc2_sqrt = _sqrt(1.0 - power(self.b2, tp))
        step_size = lr / bc1
        new_p, new_m, new_v = [], [], []
        for p, g, m, v, d in zip(ps, gs, ms, vs, decay):
            if self.weight_decay != 0 and d:
                if self.decoupled:
                    p = p * (1.0 - like(lr * self.weight_decay, p))
                else:
                    g = g + self.weight_decay * p
            m = m + (1.0 - self.b1) * (g - m)
            v = self.b2 * v + (1.0 - self.b2) * g * g
            denom = tnp.sqrt(v) / like(bc2_sqrt, p) + self.eps
            new_p.append(p + (-like(step_size, p) * m) / denom)
            new_m.append(m)
            new_v.append(v)
        unf = _pytree.unflatten
        return unf(tree, new_p), AdamState(t, unf(tree, new_m), unf(tree, new_v))


def _sqrt(x):
    return math.sqrt(x) if isinstance(x, float) else tnp.sqrt(x)


@_frozen
class AdamW(Adam):
    """PyTorch's ``torch.optim.AdamW``: Adam with decoupled weight decay
    (``p ← p · (1 - lr · weight_decay)`` before the Adam step; default 0.01)."""
    weight_decay: float = 1e-2
    decoupled: bool = True


@_frozen
class RMSpropState:
    """``count``; ``square_avg``; ``grad_avg`` (centered only) and ``momentum`` (momentum > 0 only), or None."""
    count: Any
    square_avg: Any
    grad_avg: Any
    momentum: Any


@_frozen
class RMSprop:
    """PyTorch's ``torch.optim.RMSprop``::

        g = grad + weight_decay · p
        s = α · s + (1 - α) · g²
        avg = √(s - ḡ²) + eps with ḡ = ḡ + (1 - α)(g - ḡ)   (centered)   or   √s + eps
        buf = momentum · buf + g / avg;  p = p - lr · buf       (momentum > 0)
        p = p - lr · g / avg                                     (otherwise)
    """
    lr: LR = 1e-2
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False

    def __post_init__(self):
        _check_lr(self.lr, "RMSprop")
        _check("alpha", self.alpha, 0.0, 1.0, who="RMSprop")       # alpha > 1 makes square_avg negative: NaN
        _check("eps", self.eps, who="RMSprop")
        _check("momentum", self.momentum, who="RMSprop")
        _check("weight_decay", self.weight_decay, who="RMSprop")

    def init(self, params) -> RMSpropState:
        return RMSpropState(_new_count(), zeros_tree(params), zeros_tree(params) if self.centered else None,
                            zeros_tree(params) if self.momentum > 0 else None)

    def update(self, params, grads, state: RMSpropState):
        _check_state(state, RMSpropState, "RMSprop")
        ps, gs, tree = flatten_like(params, grads, "RMSprop")
        n = len(ps)
        sq = leaves_of(state.square_avg, tree, "RMSprop", "square_avg", ps)
        ga = leaves_of(state.grad_avg, tree, "RMSprop", "grad_avg", ps) if self.centered else [None] * n
        bf = leaves_of(state.momentum, tree, "RMSprop", "momentum", ps) if self.momentum > 0 else [None] * n
        lr = lr_at(self.lr, state.count)
        new_p, new_s, new_g, new_b = [], [], [], []
        for p, g, s, a, b in zip(ps, gs, sq, ga, bf):
            if self.weight_decay != 0:
                g = g + self.weight_decay * p
            s = self.alpha * s + (1.0 - self.alpha) * g * g
            if self.centered:
                a = a + (1.0 - self.alpha) * (g - a)
                avg = tnp.sqrt(s - a * a) + self.eps
            else:
                avg = tnp.sqrt(s) + self.eps
            if self.momentum > 0:
                b = self.momentum * b + g / avg
                p = p - like(lr, p) * b
            else:
                p = p + (-like(lr, p) * g) / avg
            new_p.append(p)
            new_s.append(s)
            new_g.append(a)
            new_b.append(b)
        unf = _pytree.unflatten
        return unf(tree, new_p), RMSpropState(next_count(state.count), unf(tree, new_s),
                                              unf(tree, new_g) if self.centered else None,
                                              unf(tree, new_b) if self.momentum > 0 else None)
