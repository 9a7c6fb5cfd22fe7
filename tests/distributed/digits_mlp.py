"""The digits MLP of ``examples/train_digits.py`` (64 -> 256 -> 128 -> 10, ReLU, AdamW,
clipping), trained for the multi-process tests: the same batches in every run, so a run
on one process is the oracle of a run on two.
"""
import numpy as np

import tlaloc as tl
from tlaloc import _pytree, nn, optim
from tlaloc import random as tr

BATCH = 64
STEPS = 50
P = tl.sharding.PartitionSpec


def data(dtype=np.float32):
    """The 1797 digits as (N, 64) images in [0, 1] and (N,) int32 labels: scikit-learn's
    ``load_digits``, read from its data file without importing scikit-learn (seconds on a
    loaded machine, in every process)."""
    import importlib.util
    import pathlib
    spec = importlib.util.find_spec("sklearn")
    table = np.loadtxt(pathlib.Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz", delimiter=",")
    return (table[:, :-1] / 16.0).astype(dtype), table[:, -1].astype(np.int32)


def schedule(steps=STEPS, seed=0, n=1797):
    """The rows of each step's batch: ``steps`` arrays of ``BATCH`` indices."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(n)[:BATCH] for _ in range(steps)]


def init(dtype=np.float32):
    """``(model, optimizer, optimizer state)``, the same in every process."""
    model = nn.MLP((64, 256, 128, 10), activation=nn.relu, key=tr.key(0))
    if np.dtype(dtype) != np.float32:
        model = nn.astype(model, dtype)
    opt = optim.AdamW(lr=3e-3, weight_decay=1e-4)
    return model, opt, opt.init(model)


def loss_fn(model, x, y):
    return nn.cross_entropy(model(x), y)


def make_step(opt, loss=loss_fn, **jit_options):
    """``step(model, opt_state, x, y) -> (model, opt_state, loss)`` compiled by ``tl.jit``
    (``loss(model, x, y)``: this MLP's by default)."""
    def train_step(model, opt_state, x, y):
        value, grads = tl.value_and_grad(loss)(model, x, y)
        grads, _ = optim.clip_by_global_norm(grads, 1.0)
        model, opt_state = opt.update(model, grads, opt_state)
        return model, opt_state, value
    return tl.jit(train_step, **jit_options)


def batch_loss(model, batch):
    x, y = batch
    return loss_fn(model, x, y)


def make_capture_step(opt, model, example, **capture_options):
    """``step(model, opt_state, x, y) -> (model, opt_state, loss)`` whose loss and gradients come
    from ``tl.capture`` (one compiled program; with ``mesh=``, across processes) and whose clipping
    and AdamW update run eagerly on the host. ``example``: an ``(x, y)`` batch of the global shapes."""
    grad = tl.capture(model, example, batch_loss, **capture_options)

    def capture_step(model, opt_state, x, y):
        loss, grads = grad(model, (x, y))
        grads = _pytree.tree_map(np.asarray, grads)      # replicated: whole in every process
        grads, _ = optim.clip_by_global_norm(grads, 1.0)
        model, opt_state = opt.update(model, grads, opt_state)
        return model, opt_state, loss
    return capture_step


def train(step, model, state, rows, x, y, feed=None):
    """Run ``step`` over the batches ``rows``; ``feed(xb, yb)`` makes the arguments (default: as they are).
    Returns ``(model, state, losses)``."""
    losses = []
    for idx in rows:
        xb, yb = (x[idx], y[idx]) if feed is None else feed(x[idx], y[idx])
        model, state, loss = step(model, state, xb, yb)
        losses.append(float(loss))
    return model, state, losses
