"""Train an MLP and a small CNN on scikit-learn's 8x8 digits with tl.nn and tl.optim.

    python examples/train_digits.py            # full run: each model reaches >= 97% test accuracy
    python examples/train_digits.py --quick    # a few epochs (what the tests run)

The training step is compiled by XLA when ``tl.jit`` exists: the whole step
(loss, gradient by source transformation, gradient clipping, AdamW update)
becomes one program, compiled once per batch shape. ``--backend interpreter``
runs the same step in the NumPy reference interpreter instead, with the
gradient traced by ``tl.capture``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from tqdm import tqdm

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc import nn, optim
from tlaloc import random as tr

BATCH = 64


def load_data(seed=0):
    """Train/test split of the 1797 digits: images (N, 1, 8, 8) in [0, 1], labels (N,)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]          # (N, 1, 8, 8)
    y = digits.target.astype(np.int32)                                # (N,)
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def mlp(key):
    """(N, 1, 8, 8) -> (N, 10): 64 -> 256 -> 128 -> 10 with ReLU."""
    return nn.MLP((64, 256, 128, 10), activation=nn.relu, key=key)


def cnn(key):
    """(N, 1, 8, 8) -> (N, 10): two conv blocks and a linear head."""
    k1, k2, k3 = tr.split(key, 3)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, key=k1), nn.relu,             # (N, 32, 8, 8)
        nn.MaxPool2d(2),                                              # (N, 32, 4, 4)
        nn.Conv2d(32, 64, 3, padding=1, key=k2), nn.relu,            # (N, 64, 4, 4)
        nn.MaxPool2d(2),                                              # (N, 64, 2, 2)
        flatten_features,                                             # (N, 256)
        nn.Linear(256, 10, key=k3))                                   # (N, 10)


def flatten_features(x):
    """(N, 64, 2, 2) -> (N, 256). The static feature size (not the batch size) is
    spelled out, so the reshape also lowers in tl.grad's shape-generic mode
    (``nn.Flatten`` needs concrete shapes: eager or ``tl.capture``)."""
    return tnp.reshape(x, (-1, 256))


def flat(x):
    """(N, 1, 8, 8) -> (N, 64) for the MLP (the reshape keeps the batch axis free)."""
    return tnp.reshape(x, (-1, 64))


def augment(x, rng):
    """Shift each image by up to one pixel in each direction (zero fill): (N, 1, 8, 8) -> (N, 1, 8, 8)."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dy, dx = rng.integers(0, 3, (2, len(x)))
    return np.stack([padded[i, :, dy[i]:dy[i] + 8, dx[i]:dx[i] + 8] for i in range(len(x))])


def mlp_loss(model, batch):
    x, y = batch
    return nn.cross_entropy(model(flat(x)), y)


def cnn_loss(model, batch):
    x, y = batch
    return nn.cross_entropy(model(x), y)


def make_trainer(model, opt, loss_fn, example_batch, backend, clip=1.0):
    """``train_step(model, opt_state, batch) -> (model, opt_state, loss)``."""
    if backend == "xla":
        def train_step(model, opt_state, batch):
            loss, grads = tl.value_and_grad(loss_fn)(model, batch)
            grads, _ = optim.clip_by_global_norm(grads, clip)
            model, opt_state = opt.update(model, grads, opt_state)
            return model, opt_state, loss
        return tl.jit(train_step)
    step = tl.capture(model, example_batch, loss_fn)              # traced once per batch shape

    def interpreted_step(model, opt_state, batch):
        loss, grads = step.run(model, batch)
        grads, _ = optim.clip_by_global_norm(grads, clip)
        model, opt_state = opt.update(model, grads, opt_state)
        return model, opt_state, loss
    return interpreted_step


def accuracy(model, x, y, prep):
    logits = np.asarray(nn.to_numpy(model)(prep(x)))                 # eager NumPy forward
    return float((logits.argmax(-1) == y).mean())


def train(name, model, loss_fn, prep, data, epochs, lr, backend, seed=0, shift=False):
    """Train with AdamW (warm-up + cosine), batches of 64, optionally with random one-pixel shifts."""
    x_tr, x_te, y_tr, y_te = data
    steps_per_epoch = len(x_tr) // BATCH                              # drop the ragged tail: one batch shape
    opt = optim.AdamW(lr=optim.cosine_with_warmup(lr, steps_per_epoch, epochs * steps_per_epoch),
                      weight_decay=1e-4)
    state = opt.init(model)
    t0 = time.perf_counter()
    step = make_trainer(model, opt, loss_fn, (x_tr[:BATCH], y_tr[:BATCH]), backend)
    rng = np.random.default_rng(seed)
    bar = tqdm(range(epochs), desc=f"{name} [{backend}]", unit="epoch", file=sys.stdout,
               disable=os.environ.get("TLALOC_NO_PROGRESS") == "1")
    for _ in bar:
        perm = rng.permutation(len(x_tr))
        total = 0.0
        for k in range(steps_per_epoch):
            idx = perm[k * BATCH:(k + 1) * BATCH]
            x = augment(x_tr[idx], rng) if shift else x_tr[idx]
            model, state, loss = step(model, state, (x, y_tr[idx]))
            total += float(loss)
        bar.set_postfix(loss=f"{total / steps_per_epoch:.4f}", test_acc=f"{accuracy(model, x_te, y_te, prep):.3f}")
    acc = accuracy(model, x_te, y_te, prep)
    print(f"{name}: test accuracy {acc:.4f} ({len(y_te)} images), final train loss "
          f"{total / steps_per_epoch:.4f}, {nn.num_params(model)} parameters, "
          f"{time.perf_counter() - t0:.1f} s [{backend}]")
    return acc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a few epochs only (for tests)")
    p.add_argument("--backend", choices=["xla", "interpreter"],
                   default="xla" if hasattr(tl, "jit") else "interpreter")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    data = load_data(args.seed)
    key_mlp, key_cnn = tr.split(tr.key(args.seed))
    quick = args.quick
    acc_mlp = train("MLP", mlp(key_mlp), mlp_loss, flat, data, 3 if quick else 40, 3e-3, args.backend, args.seed)
    acc_cnn = train("CNN", cnn(key_cnn), cnn_loss, lambda x: x, data, 3 if quick else 25, 3e-3, args.backend,
                    args.seed, shift=True)                          # shifts help a translation-equivariant model
    if not quick:
        ok = acc_mlp >= 0.97 and acc_cnn >= 0.97
        print("both models reach 97%:", "yes" if ok else "NO")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
