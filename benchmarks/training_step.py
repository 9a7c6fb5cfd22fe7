"""Training step: the digits MLP and a small transformer, tlaloc vs JAX vs PyTorch.

    python benchmarks/training_step.py [--quick] [--repeats N] [--clock cpu] [--threads N]

One step = loss, gradient and an AdamW update (PyTorch's defaults), float32.
tlaloc: ``tl.jit(train_step)`` with ``tl.nn`` modules, ``tl.value_and_grad`` and
``tl.optim.AdamW`` (one XLA program per step). JAX: ``jax.jit`` of the same
step written with ``jax.numpy`` and a hand-written AdamW. PyTorch 2.13 CPU,
eager (``zero_grad``, ``backward``, ``optimizer.step``). The model and
optimizer state are carried from call to call, as in a training loop; each
call waits for its loss (one XLA execution: its outputs are ready together).
All three start from the same weights and their first losses are checked to
agree. See train_models.py for the models.

Goal (issue 9, goal 4): tlaloc ≤ 1.1× JAX.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import common  # noqa: E402
import train_models as M  # noqa: E402

PEERS = ["jax", "torch"]


def _missing(tl) -> str:
    need = [n for n in ("jit", "nn", "optim", "value_and_grad") if not hasattr(tl, n)]
    return ", ".join(f"tl.{n}" for n in need)


def _tl_impl(tl, model, loss_fn, batch):
    opt, train_step = M.tl_train_step(loss_fn)
    step = tl.jit(train_step)
    carry = [model, opt.init(model)]
    first = float(np.asarray(tl.value_and_grad(loss_fn)(model, batch)[0]))

    def call():
        carry[0], carry[1], loss = step(carry[0], carry[1], batch)
        loss.block_until_ready()
        return loss
    return call, first


def _jax_impl(jax, params, loss_fn, batch):
    import jax.numpy as jnp
    params = jax.tree.map(jnp.asarray, params)
    step = M.jax_train_step(loss_fn)
    carry = [params, M.jax_init_state(jnp, params)]
    first = float(loss_fn(params, batch))

    def call():
        carry[0], carry[1], loss = step(carry[0], carry[1], batch)
        loss.block_until_ready()
        return loss
    return call, first


def _torch_impl(torch, model, batch, flatten_tokens):
    x = torch.from_numpy(batch[0] if not flatten_tokens else batch[0].astype(np.int64))
    y = torch.from_numpy(batch[1].astype(np.int64))
    F = torch.nn.functional

    def loss_of(m):
        out = m(x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    with torch.no_grad():
        first = float(loss_of(model))
    return M.torch_step(torch, model, loss_of), first


def run(quick: bool = False, repeats=None):
    import tlaloc as tl
    common.print_header("4. training step (float32, AdamW)")
    missing = _missing(tl)
    if missing:
        common.print_skipped("training step", f"{missing} missing")
        return None
    jax = common.optional_import("jax")
    torch = common.optional_import("torch")
    if torch is not None:
        common.torch_threads(torch)
    bench = common.Bench(quick=quick, repeats=repeats or (5 if quick else 21))
    mlp = M.tl_mlp()
    trf = M.tl_transformer()
    cases = [("digits MLP 64-256-128-10, batch 64", mlp, M.tl_mlp_loss, M.digits_batch(),
              M.mlp_weights(mlp), M.jax_mlp_loss, lambda t, w: M.torch_mlp(t, w), False),
             (f"transformer {M.LAYERS}x(C={M.C}, {M.HEADS} heads), batch {M.B_TOK}x{M.T}", trf,
              M.tl_transformer_loss, M.token_batch(), M.transformer_weights(trf), M.jax_transformer_loss,
              lambda t, w: M.torch_transformer(t, w), True)]
    for name, model, tl_loss, batch, weights, jax_loss, torch_model, tokens in cases:
        impls, firsts = {}, {}
        try:
            impls["tlaloc"], firsts["tlaloc"] = _tl_impl(tl, model, tl_loss, batch)
        except Exception as e:                              # a failing workload still lets the others run
            impls["tlaloc"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        if jax is None:
            impls["jax"] = "jax not installed"
        else:
            impls["jax"], firsts["jax"] = _jax_impl(jax, weights, jax_loss, batch)
        if torch is None:
            impls["torch"] = "torch not installed"
        else:
            impls["torch"], firsts["torch"] = _torch_impl(torch, torch_model(torch, weights), batch, tokens)
        ref = next(iter(firsts.values()))
        for k, v in firsts.items():
            common.assert_close(f"{name}: initial loss of {k}", v, ref, rtol=1e-4, atol=1e-5)
        row = bench.compare(name, impls)
        t, j = row.timings.get("tlaloc"), row.timings.get("jax")
        row.note = f"initial loss {ref:.4f} (all agree)"
        if isinstance(t, common.Timing) and isinstance(j, common.Timing):
            row.note = f"goal {'met' if t.median <= 1.1 * j.median else 'missed'}; " + row.note
    bench.print_table(PEERS)
    return bench


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv)
    run(args.quick, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
