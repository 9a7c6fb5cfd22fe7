"""The two training workloads, written once for tlaloc, JAX and PyTorch with the same weights.

* digits MLP: 64 → 256 → 128 → 10, ReLU, softmax cross-entropy, batch 64 (float32).
* small transformer: token embedding (vocab 96, C=64), 2 pre-LayerNorm blocks
  (4 heads, causal attention without positional encoding, tanh-GELU MLP 4·C,
  no biases), final LayerNorm, linear head; next-token cross-entropy,
  batch 16 × 32 tokens (float32).

The tlaloc model is built with ``tl.nn``; its weights are copied into the
JAX and PyTorch versions so that all three compute the same loss (checked
before timing). The optimizer is AdamW with PyTorch's defaults (lr 1e-3,
betas (0.9, 0.999), eps 1e-8, weight decay 1e-2) everywhere.
"""
from __future__ import annotations

import math

import numpy as np

from tlaloc import nn

VOCAB, C, HEADS, LAYERS, T, B_TOK = 96, 64, 4, 2, 32, 16
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 1e-2


# -- data -----------------------------------------------------------------------------------

def digits_batch(n: int = 64):
    """x (n, 64) float32 in [0, 1], y (n,) int32: the first n of scikit-learn's 8x8 digits
    (random pixels when scikit-learn is missing)."""
    try:
        from sklearn.datasets import load_digits
        d = load_digits()
        x, y = d.data[:n] / 16.0, d.target[:n]
    except Exception:
        r = np.random.default_rng(0)
        x, y = r.uniform(0, 1, (n, 64)), r.integers(0, 10, n)
    return x.astype(np.float32), y.astype(np.int32)


def token_batch():
    """ids (B, T) and next-token targets (B, T), int32."""
    ids = np.random.default_rng(0).integers(0, VOCAB, (B_TOK, T + 1))
    return ids[:, :-1].astype(np.int32), ids[:, 1:].astype(np.int32)


# -- tlaloc ---------------------------------------------------------------------------------

def tl_mlp():
    return nn.MLP((64, 256, 128, 10), activation=nn.relu, key=0)


def tl_mlp_loss(model, batch):
    x, y = batch
    return nn.cross_entropy(model(x), y)


def tl_transformer():
    blocks = tuple(nn.TransformerBlock(C, HEADS, rope_theta=None, key=10 + i) for i in range(LAYERS))
    return {"emb": nn.Embedding(VOCAB, C, key=1), "blocks": blocks,
            "norm": nn.LayerNorm(C, bias=False), "head": nn.Linear(C, VOCAB, bias=False, key=2)}


def tl_transformer_loss(model, batch):
    ids, targets = batch
    h = model["emb"](ids)                                   # (B, T, C)
    for block in model["blocks"]:
        h = block(h)                                        # (B, T, C)
    logits = model["head"](model["norm"](h))                # (B, T, V)
    return nn.cross_entropy(logits, targets)


def tl_train_step(loss_fn):
    import tlaloc as tl
    from tlaloc import optim
    opt = optim.AdamW(lr=LR, b1=BETA1, b2=BETA2, eps=EPS, weight_decay=WD)

    def train_step(model, state, batch):
        loss, grads = tl.value_and_grad(loss_fn)(model, batch)
        model, state = opt.update(model, grads, state)
        return model, state, loss
    return opt, train_step


# -- weights as plain arrays ----------------------------------------------------------------

def mlp_weights(model) -> list:
    """[(W (out, in), b (out,)), ...] in layer order."""
    return [(np.asarray(l.weight), np.asarray(l.bias)) for l in model.layers]


def transformer_weights(model) -> dict:
    blocks = []
    for b in model["blocks"]:
        a = b.attn
        blocks.append({"ln1": np.asarray(b.norm1.weight), "q": np.asarray(a.q_proj.weight),
                       "k": np.asarray(a.k_proj.weight), "v": np.asarray(a.v_proj.weight),
                       "o": np.asarray(a.o_proj.weight), "ln2": np.asarray(b.norm2.weight),
                       "fc1": np.asarray(b.mlp.layers[0].weight), "fc2": np.asarray(b.mlp.layers[1].weight)})
    return {"emb": np.asarray(model["emb"].weight), "blocks": blocks, "ln": np.asarray(model["norm"].weight),
            "head": np.asarray(model["head"].weight)}


# -- JAX ------------------------------------------------------------------------------------

def jax_adamw(jnp, params, grads, state):
    """PyTorch's AdamW on pytrees of jax arrays; state = (count, m, v)."""
    import jax
    count, m, v = state
    t = count + 1
    m = jax.tree.map(lambda m_, g: m_ + (1 - BETA1) * (g - m_), m, grads)
    v = jax.tree.map(lambda v_, g: BETA2 * v_ + (1 - BETA2) * g * g, v, grads)
    bc1 = 1 - BETA1 ** t.astype(jnp.float32)
    bc2 = jnp.sqrt(1 - BETA2 ** t.astype(jnp.float32))
    params = jax.tree.map(lambda p, m_, v_: p * (1 - LR * WD) - (LR / bc1) * m_ / (jnp.sqrt(v_) / bc2 + EPS),
                          params, m, v)
    return params, (t, m, v)


def jax_init_state(jnp, params):
    import jax
    zeros = jax.tree.map(jnp.zeros_like, params)
    return (jnp.zeros((), jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params))


def jax_cross_entropy(jnp, logits, labels):
    import jax
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None].astype(jnp.int32), axis=-1))


def jax_mlp_loss(params, batch):
    import jax
    import jax.numpy as jnp
    x, y = batch
    for W, b in params[:-1]:
        x = jax.nn.relu(x @ W.T + b)
    W, b = params[-1]
    return jax_cross_entropy(jnp, x @ W.T + b, y)


def _jax_layernorm(jnp, x, w, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * w


def jax_transformer_loss(params, batch):
    import jax
    import jax.numpy as jnp
    ids, targets = batch
    h = params["emb"][ids]                                            # (B, T, C)
    b_, t_ = ids.shape
    d = C // HEADS
    mask = jnp.tril(jnp.ones((t_, t_), bool))
    for p in params["blocks"]:
        x = _jax_layernorm(jnp, h, p["ln1"])
        q, k, v = ((x @ p[n].T).reshape(b_, t_, HEADS, d).transpose(0, 2, 1, 3) for n in ("q", "k", "v"))
        s = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(d)), -jnp.inf)   # (B, H, T, T)
        y = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b_, t_, C)
        h = h + y @ p["o"].T
        x = _jax_layernorm(jnp, h, p["ln2"])
        h = h + jax.nn.gelu(x @ p["fc1"].T, approximate=True) @ p["fc2"].T
    logits = _jax_layernorm(jnp, h, params["ln"]) @ params["head"].T
    return jax_cross_entropy(jnp, logits, targets)


def jax_train_step(loss_fn):
    import jax
    import jax.numpy as jnp

    def step(params, state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        params, state = jax_adamw(jnp, params, grads, state)
        return params, state, loss
    return jax.jit(step)


# -- PyTorch --------------------------------------------------------------------------------

def torch_mlp(torch, weights):
    layers = []
    for k, (W, b) in enumerate(weights):
        lin = torch.nn.Linear(W.shape[1], W.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(W))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if k < len(weights) - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def torch_transformer(torch, w):
    F = torch.nn.functional

    def param(a):
        return torch.nn.Parameter(torch.from_numpy(np.array(a)))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = param(w["emb"])
            self.blocks = torch.nn.ParameterList([param(p[n]) for p in w["blocks"]
                                                  for n in ("ln1", "q", "k", "v", "o", "ln2", "fc1", "fc2")])
            self.ln = param(w["ln"])
            self.head = param(w["head"])

        def forward(self, ids):
            h = self.emb[ids]                                                  # (B, T, C)
            b_, t_ = ids.shape
            d = C // HEADS
            for i in range(LAYERS):
                ln1, q, k, v, o, ln2, fc1, fc2 = self.blocks[8 * i: 8 * i + 8]
                x = F.layer_norm(h, (C,), ln1, None, 1e-5)
                q_, k_, v_ = ((x @ m.T).reshape(b_, t_, HEADS, d).transpose(1, 2) for m in (q, k, v))
                y = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)  # (B, H, T, d)
                h = h + y.transpose(1, 2).reshape(b_, t_, C) @ o.T
                x = F.layer_norm(h, (C,), ln2, None, 1e-5)
                h = h + F.gelu(x @ fc1.T, approximate="tanh") @ fc2.T
            return F.layer_norm(h, (C,), self.ln, None, 1e-5) @ self.head.T   # (B, T, V)
    return Model()


def torch_step(torch, model, loss_of):
    """A closure running one AdamW step; returns the loss tensor."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model)
        loss.backward()
        opt.step()
        return loss
    return step
