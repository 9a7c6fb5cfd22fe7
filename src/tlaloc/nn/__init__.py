"""``tl.nn``: layers as frozen dataclasses (pytrees), activations and losses.

    import tlaloc as tl
    from tlaloc import nn
    model = nn.Sequential(nn.Linear(64, 128, key=1), nn.relu, nn.Linear(128, 10, key=2))
    loss = lambda m, x, y: nn.cross_entropy(m(x), y)
    grads = tl.grad(loss)(model, x, y)                 # same structure as model

Layers are immutable: training returns new modules (``tl.optim``), and
``module.replace(weight=w)`` builds a changed copy. Every layer is written with
``tlaloc.numpy``, so ``tl.grad``, ``tl.capture`` and eager NumPy all run it.
"""
from ._module import Module, static_field, num_params, astype, to_numpy
from ._linear import Linear, Embedding, Dropout, Lambda, Sequential, MLP, SwiGLU
from ._norm import LayerNorm, RMSNorm
from ._conv import Conv2d, MaxPool2d, AvgPool2d, Flatten
from ._attention import MultiHeadAttention, TransformerBlock, rope, causal_mask
from .functional import (relu, gelu, gelu_tanh, silu, sigmoid, tanh, softmax, log_softmax, one_hot, cross_entropy,
                         mse_loss)
from . import init, functional

__all__ = [
    "Module", "static_field", "num_params", "astype", "to_numpy",
    "Linear", "Embedding", "Dropout", "Lambda", "Sequential", "MLP", "SwiGLU",
    "LayerNorm", "RMSNorm", "Conv2d", "MaxPool2d", "AvgPool2d", "Flatten",
    "MultiHeadAttention", "TransformerBlock", "rope", "causal_mask",
    "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "one_hot", "cross_entropy", "mse_loss",
    "init", "functional",
]
