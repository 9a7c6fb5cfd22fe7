"""Train across processes with tlaloc.distributed: the digits MLP or the character transformer.

    tlaloc launch -n 2 examples/train_distributed.py                       # data parallel, digits MLP
    tlaloc launch -n 2 examples/train_distributed.py --fsdp                # parameters + AdamW state sharded
    tlaloc launch -n 2 examples/train_distributed.py --model charlm --fsdp
    tlaloc launch -n 2 examples/train_distributed.py --save ckpt --steps 50 && \\
        tlaloc launch -n 2 examples/train_distributed.py --resume ckpt --steps 100
    python examples/train_distributed.py                                   # one process, one device

Every process runs this script. ``tl.jit`` compiles one program for the mesh of
every process's devices; each process feeds its rows of each global batch
(``dist.global_array``), and XLA's SPMD partitioner all-reduces the gradients
(data parallel) or gathers each weight where it is used (``--fsdp``). The losses
printed by process 0 equal a one-process run's (to float32 rounding).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import tlaloc as tl
from tlaloc import distributed as dist
from tlaloc import optim
from tlaloc import random as tr

P = tl.sharding.PartitionSpec


def digits(batch, seed):
    """The MLP of train_digits.py and ``next_batch() -> (x (B, 64), y (B,))``, the same in every process."""
    import train_digits
    x_tr, _, y_tr, _ = train_digits.load_data(seed)
    x_tr = x_tr.reshape(len(x_tr), 64)
    rng = np.random.default_rng(seed)

    def next_batch():
        idx = rng.permutation(len(x_tr))[:batch]
        return x_tr[idx], y_tr[idx]

    def loss_fn(model, x, y):
        return tl.nn.cross_entropy(model(x), y)
    return train_digits.mlp(tr.key(seed)), loss_fn, next_batch


def charlm(batch, seed, block=32):
    """The transformer of train_charlm.py and ``next_batch() -> (ids (B, T), targets (B, T))``."""
    import train_charlm
    text, vocab = train_charlm.load_corpus()
    stoi = {c: i for i, c in enumerate(vocab)}
    data = np.array([stoi[c] for c in text], dtype=np.int32)
    rng = np.random.default_rng(seed)

    def loss_fn(model, ids, targets):
        return train_charlm.loss_fn(model, (ids, targets))
    return (train_charlm.CharLM(len(vocab), key=tr.key(seed)), loss_fn,
            lambda: train_charlm.batches(data, block, batch, rng))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["digits", "charlm"], default="digits")
    p.add_argument("--fsdp", action="store_true", help="shard parameters and optimizer state over the processes")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", help="write a sharded checkpoint here at the end")
    p.add_argument("--resume", help="start from this sharded checkpoint (same process count and sharding)")
    args = p.parse_args(argv)
    if os.environ.get(dist.ENV["num_processes"][0]):
        dist.initialize()                          # started by `tlaloc launch`
    n, me = dist.process_count(), dist.process_index()
    model, loss_fn, next_batch = (digits if args.model == "digits" else charlm)(args.batch, args.seed)
    opt = optim.AdamW(lr=3e-3, weight_decay=1e-4)
    state = opt.init(model)

    def train_step(model, opt_state, x, y):
        loss, grads = tl.value_and_grad(loss_fn)(model, x, y)
        grads, _ = optim.clip_by_global_norm(grads, 1.0)
        model, opt_state = opt.update(model, grads, opt_state)
        return model, opt_state, loss

    mesh = tl.sharding.Mesh({"data": n})
    specs = ((dist.fsdp_shardings(model, mesh), dist.fsdp_shardings(state, mesh)) if args.fsdp else (P(), P()))
    step = tl.jit(train_step, mesh=mesh, in_shardings=(*specs, P("data"), P("data")), out_shardings=(*specs, P()))
    model, state = dist.put(model, mesh, specs[0]), dist.put(state, mesh, specs[1])     # each keeps its shards
    start = 0
    if args.resume:
        model, state, start = dist.load_sharded(args.resume, (model, state), mesh=mesh, shardings=specs)
        for _ in range(start):
            next_batch()                            # the same batches as an uninterrupted run
    for k in range(start, args.steps):
        x, y = next_batch()
        lo, hi = me * len(x) // n, (me + 1) * len(x) // n
        model, state, loss = step(model, state, *dist.global_array((x[lo:hi], y[lo:hi]), mesh, P("data")))
        if me == 0 and (k % 10 == 0 or k == args.steps - 1):
            print(f"step {k:4d}  loss {float(loss):.6f}", flush=True)
    if me == 0:
        print(f"{args.model}{' (FSDP)' if args.fsdp else ''}: {n} process(es); this one holds "
              f"{dist.local_nbytes(model):,} bytes of the {4 * tl.nn.num_params(model):,} of float32 parameters")
    if args.save:
        dist.save_sharded(args.save, model, state, step=args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
