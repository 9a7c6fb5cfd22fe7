"""Linear, Embedding, Dropout, Lambda, Sequential, MLP and SwiGLU."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from .. import numpy as tnp
from .. import random as _random
from .._prims import checks as _checks
from ..errors import ArgumentError
from . import functional as F
from . import init
from ._module import Module, as_key, check_input, size_arg, split_key, static_field

_frozen = dataclasses.dataclass(frozen=True, eq=False, repr=False)


@_frozen
class Linear(Module):
    """``y = x Wᵀ + b``, PyTorch's ``nn.Linear`` (same weight layout).

    Args:
      in_features, out_features: sizes of the last axis in and out.
      bias: whether to add a bias.
      dtype: parameter dtype (float32 by default, as PyTorch).
      key: a ``tlaloc.random`` key or an int seed.

    Fields: ``weight (out_features, in_features)``, ``bias (out_features,)`` or None.
    Init: PyTorch's, kaiming_uniform(a=√5) and U(-1/√in, 1/√in) (see ``tl.nn.init``).

    Call: ``x (..., in_features) -> (..., out_features)``.
    """
    weight: Any
    bias: Any
    in_features: int = static_field()
    out_features: int = static_field()

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True, dtype=np.float32, key=None):
        in_features = size_arg(in_features, "in_features", "Linear", "the size of the input's last axis",
                               "Linear(64, 10)")
        out_features = size_arg(out_features, "out_features", "Linear", "the size of the output's last axis",
                                "Linear(64, 10)")
        kw, kb = split_key(as_key(key, "Linear"), 2)
        w = init.kaiming_uniform(kw, (out_features, in_features), dtype=dtype)
        b = init.fan_in_uniform(kb, (out_features,), in_features, dtype=dtype) if bias else None
        self._set(weight=w, bias=b, in_features=int(in_features), out_features=int(out_features))

    def __call__(self, x):
        x = check_input(x, "Linear", f"(..., in_features={self.in_features})", trailing=(self.in_features,))
        y = tnp.matmul(x, tnp.transpose(self.weight))          # (..., out)
        if self.bias is not None:
            y = y + self.bias
        return y


@_frozen
class Embedding(Module):
    """A lookup table, PyTorch's ``nn.Embedding``.

    Fields: ``weight (num_embeddings, embedding_dim)``, init N(0, 1).
    Call: ``ids (...) integers -> (..., embedding_dim)``.
    """
    weight: Any
    num_embeddings: int = static_field()
    embedding_dim: int = static_field()

    def __init__(self, num_embeddings: int, embedding_dim: int, *, dtype=np.float32, key=None):
        num_embeddings = size_arg(num_embeddings, "num_embeddings", "Embedding", "the number of rows, one per id",
                                  "Embedding(1000, 64)")
        embedding_dim = size_arg(embedding_dim, "embedding_dim", "Embedding", "the size of each row",
                                 "Embedding(1000, 64)")
        w = init.normal(as_key(key, "Embedding"), (num_embeddings, embedding_dim), dtype=dtype)
        self._set(weight=w, num_embeddings=int(num_embeddings), embedding_dim=int(embedding_dim))

    def __call__(self, ids):
        n = self.num_embeddings
        if isinstance(ids, (np.ndarray, np.generic, list, tuple, int)):          # eager: refuse bad ids
            a = np.asarray(ids)
            if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
                raise ArgumentError(f"Embedding: ids must be integers, got dtype {a.dtype}; convert them with "
                                    f".astype(np.int64)")
            bad = np.flatnonzero((a < 0) | (a >= n))
            if bad.size:
                raise ArgumentError(f"Embedding: ids must be in [0, {n}) (num_embeddings={n}), but "
                                    f"{a.reshape(-1)[bad[0]]} is not ({bad.size} bad in all); negative ids do "
                                    f"not wrap around")
            return tnp.take(self.weight, ids, axis=0)
        # checked where the graph runs on arrays (tl.grad), float ids refused when tl.jit specialises;
        # compiled code cannot raise: an id outside [0, n) gives a row of NaN, never another row
        ids = _checks.check_labels(ids, n, None, who="Embedding")
        ok = tnp.logical_and(tnp.greater_equal(ids, 0), tnp.less(ids, n))           # (...)
        rows = tnp.take(self.weight, tnp.where(ok, ids, 0), axis=0)                   # (..., embedding_dim)
        return tnp.where(tnp.expand_dims(ok, -1), rows, tnp.nan)


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@_frozen
class Dropout(Module):
    """Inverted dropout, PyTorch's ``nn.Dropout`` in training mode: each element
    is zeroed with probability ``p`` and the rest are scaled by ``1 / (1 - p)``.

    The randomness is explicit: ``drop(x, key=k)`` draws the mask from the
    ``tlaloc.random`` key ``k`` (derive one per step, e.g. ``random.fold_in(k, step)``),
    so a run is reproducible bit for bit. ``inference=True`` (or ``p == 0``)
    returns ``x`` unchanged.

    The mask's shape must be known when the mask is drawn: eager NumPy and
    ``tl.capture`` know it; inside ``tl.grad``'s shape-generic lowering it is
    not known and ``tlaloc.random`` refuses it.

    Call: ``x (...) -> (...)``, same shape and dtype.
    """
    p: float = static_field()

    def __init__(self, p: float = 0.5):
        if not _is_real(p) or not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout: p must be a probability in [0, 1] (of zeroing each element), got {p!r}; "
                                f"pass e.g. Dropout(0.1), or Dropout(0.0) for none")
        self._set(p=float(p))

    def __call__(self, x, *, key=None, inference: bool = False):
        if inference or self.p == 0.0:
            return x
        if key is None:
            raise ArgumentError("Dropout: training mode needs `key=` (a tlaloc.random key); pass "
                                "inference=True to switch dropout off")
        if self.p == 1.0:
            return x * 0.0
        dtype = x.dtype
        u = _random.uniform(key, tuple(tnp.shape(x)), dtype)            # (...) in [0, 1)
        keep = tnp.greater_equal(u, self.p)
        return tnp.where(keep, x * (1.0 / (1.0 - self.p)), 0.0)


@_frozen
class Lambda(Module):
    """A parameter-free function as a module (``Sequential`` wraps functions in it)."""
    fn: Callable = static_field()

    def __init__(self, fn: Callable):
        self._set(fn=fn)

    def __call__(self, x):
        return self.fn(x)


@_frozen
class Sequential(Module):
    """Layers applied in order: ``Sequential(Linear(...), relu, Linear(...))``.

    Plain functions (activations) are wrapped in ``Lambda``. ``key`` is split
    among the ``Dropout`` layers; ``inference`` is passed to them.

    Call: ``x -> layers[-1](...layers[0](x))``.
    """
    layers: tuple

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        wrapped = []
        for layer in layers:
            if not isinstance(layer, Module):
                if not callable(layer):
                    raise ArgumentError(f"Sequential: {layer!r} is neither a Module nor a function")
                layer = Lambda(layer)
            wrapped.append(layer)
        self._set(layers=tuple(wrapped))

    def __call__(self, x, *, key=None, inference: bool = False):
        stochastic = [i for i, layer in enumerate(self.layers) if isinstance(layer, Dropout)]
        keys = dict(zip(stochastic, split_key(key, len(stochastic)))) if key is not None and stochastic else {}
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Dropout):
                x = layer(x, key=keys.get(i), inference=inference)
            else:
                x = layer(x)
        return x

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)


@_frozen
class MLP(Module):
    """Linear layers of the given ``sizes`` with ``activation`` between them
    (not after the last): ``MLP((64, 128, 10))`` is Linear(64→128), relu, Linear(128→10).

    Call: ``x (..., sizes[0]) -> (..., sizes[-1])``.
    """
    layers: tuple
    activation: Callable = static_field()

    def __init__(self, sizes, *, activation: Callable = F.relu, bias: bool = True, dtype=np.float32, key=None):
        if isinstance(sizes, (int, np.integer, str)) or not hasattr(sizes, "__len__"):
            raise ArgumentError(f"MLP: sizes must be a tuple of layer widths (input, hidden..., output), got "
                                f"{sizes!r}; pass e.g. MLP((64, 128, 10))")
        sizes = tuple(size_arg(s, f"sizes[{i}]", "MLP", "a layer width", "MLP((64, 128, 10))")
                      for i, s in enumerate(sizes))
        if len(sizes) < 2:
            raise ArgumentError(f"MLP: sizes needs at least an input and an output size, got {sizes}")
        keys = split_key(as_key(key, "MLP"), len(sizes) - 1)
        layers = tuple(Linear(a, b, bias=bias, dtype=dtype, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys))
        self._set(layers=layers, activation=activation)

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


@_frozen
class SwiGLU(Module):
    """The gated feed-forward block of Llama: ``down(silu(gate(x)) * up(x))``.

    Fields: ``gate_proj``, ``up_proj`` (d_model → hidden), ``down_proj`` (hidden → d_model), Linear.
    Call: ``x (..., d_model) -> (..., d_model)``.
    """
    gate_proj: Linear
    up_proj: Linear
    down_proj: Linear

    def __init__(self, d_model: int, hidden: int, *, bias: bool = False, dtype=np.float32, key=None):
        d_model = size_arg(d_model, "d_model", "SwiGLU", "the size of the input's last axis", "SwiGLU(64, 172)")
        hidden = size_arg(hidden, "hidden", "SwiGLU", "the gate and up projections' width", "SwiGLU(64, 172)")
        kg, ku, kd = split_key(as_key(key, "SwiGLU"), 3)
        self._set(gate_proj=Linear(d_model, hidden, bias=bias, dtype=dtype, key=kg),
                  up_proj=Linear(d_model, hidden, bias=bias, dtype=dtype, key=ku),
                  down_proj=Linear(hidden, d_model, bias=bias, dtype=dtype, key=kd))

    def __call__(self, x):
        h = F.silu(self.gate_proj(x)) * self.up_proj(x)        # (..., hidden)
        return self.down_proj(h)                               # (..., d_model)


