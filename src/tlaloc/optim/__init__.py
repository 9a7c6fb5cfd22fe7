"""``tl.optim``: pure optimizers, learning-rate schedules and gradient clipping.

    opt = tl.optim.AdamW(lr=tl.optim.cosine_with_warmup(3e-3, 100, 2000))
    state = opt.init(model)
    loss, grads = step.run(model, batch)
    grads, norm = tl.optim.clip_by_global_norm(grads, 1.0)
    model, state = opt.update(model, grads, state)

Every update is PyTorch's formula; nothing is mutated.
"""
from ._optimizers import SGD, SGDState, Adam, AdamW, AdamState, RMSprop, RMSpropState
from .schedules import constant, step_decay, exponential_decay, cosine_decay, cosine_with_warmup
from .clip import global_norm, clip_by_global_norm, clip_by_value

__all__ = [
    "SGD", "SGDState", "Adam", "AdamW", "AdamState", "RMSprop", "RMSpropState",
    "constant", "step_decay", "exponential_decay", "cosine_decay", "cosine_with_warmup",
    "global_norm", "clip_by_global_norm", "clip_by_value",
]
