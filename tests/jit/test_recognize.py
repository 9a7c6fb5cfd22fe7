"""Recognizers and coarsening on a transformer block written with tlaloc.numpy:
RMSNorm → attention (grouped-query, RoPE, causal mask) → RMSNorm → SwiGLU, and a
softmax cross-entropy loss. Recognition is found; coarsening changes no number,
forward or gradient; the reverse rule reads the analytic gradient body; a kernel
that claims an op turns it into a custom call."""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc._ad.forward import jvp_graph
from tlaloc._ad.reverse import vjp_graph
from tlaloc._core.graph import Node
from tlaloc._core.interpreter import eval_graph
from tlaloc._core.specialize import specialize
from tlaloc._recognize import coarsen, decompose, is_coarsened, summary
from tlaloc._render.stablehlo import emit_module
from tlaloc._runtime.pjrt import Executable

from . import transformer_block as T

BLOCK_OPS = ["rms_norm", "rope", "rope", "attention", "rms_norm", "swiglu"]


@pytest.fixture(scope="module")
def inputs():
    return T.make_inputs(np.random.default_rng(0))


@pytest.fixture(scope="module")
def loss_graph(inputs):
    return tl.jit(T.loss, recognize=False).lower(*inputs).graph       # specialised, float64


def _flat(inputs):
    return tl._pytree.flatten(inputs)[0]


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1e-300, float(np.max(np.abs(b)))))


def test_recognition_in_the_transformer_block(inputs):
    lowered = tl.jit(T.block).lower(*inputs[:5])
    found = lowered.recognized
    assert [op for op, _ in found] == BLOCK_OPS
    attrs = dict(found)
    att = attrs["attention"]
    assert (att["n_rep"], att["heads"], att["kv_heads"], att["masked"], att["scale"]) == (2, 4, 2, True, 0.5)
    assert attrs["rms_norm"]["eps"] == T.EPS and attrs["rope"]["half"] == T.HD // 2
    assert attrs["swiglu"]["hidden"] == T.F
    loss_ops = [op for op, _ in tl.jit(T.loss).lower(*inputs).recognized]
    assert loss_ops == BLOCK_OPS + ["cross_entropy"]


def test_coarsened_graph_prints_with_forward_and_gradient_regions(loss_graph):
    c = coarsen(loss_graph)
    text = str(c)
    for region in ("def attention_fwd(", "def attention_grad(", "def rms_norm_grad(", "def cross_entropy_grad("):
        assert region in text
    # the regions a coarsened node holds are verified graphs of concrete avals
    node = next(n for n in c.nodes if n.prim.name == "attention")
    assert node.params["diff"] == (True, True, True, False)          # q, k, v; not the mask
    assert len(node.params["grad"].outputs) == 3


def test_forward_numerics_unchanged(inputs, loss_graph):
    flat = _flat(inputs)
    c = coarsen(loss_graph)
    assert eval_graph(c, *flat)[0] == eval_graph(loss_graph, *flat)[0]      # the same nodes, bit for bit
    # compiled: the emitted module is the one without recognition (nothing claims the ops)
    with_r, without = tl.jit(T.loss).lower(*inputs), tl.jit(T.loss, recognize=False).lower(*inputs)
    assert with_r.as_text() == without.as_text()
    assert float(np.asarray(tl.jit(T.loss)(*inputs))) == float(tl.jit(T.loss, backend="interpreter")(*inputs))


def test_gradient_numerics_unchanged(inputs, loss_graph):
    """The analytic gradient bodies give the autodiff gradient of the matched nodes."""
    flat = _flat(inputs)
    c = coarsen(loss_graph)
    plain, _ = vjp_graph(loss_graph)
    coarse, _ = vjp_graph(c)
    assert [n.prim.name for n in coarse.nodes if is_coarsened(n)] == BLOCK_OPS + ["cross_entropy"]
    want = eval_graph(plain, *flat, np.float64(1.0))
    got = eval_graph(coarse, *flat, np.float64(1.0))
    for k, (g, w) in enumerate(zip(got, want)):
        if np.asarray(w).dtype.kind == "f":
            assert _rel(g, w) < 1e-12, (k, _rel(g, w))
    # compiled: the coarsened gradient graph, specialised (coarsened ops kept), decomposed, through XLA
    s = specialize(coarse, [v.aval for v in coarse.inputs])
    assert sum(is_coarsened(n) for n in s.nodes) == 7
    exe = Executable(emit_module(decompose(s), name="coarse_grad"))
    outs = exe(*flat, np.float64(1.0))
    value, grads = tl.value_and_grad(T.loss, argnums=(0, 1))(*inputs)
    assert _rel(outs[0], value) < 1e-12
    for g, w in zip(outs[1:1 + 10], _flat(grads)):
        assert _rel(g, w) < 1e-12


def test_forward_mode_differentiates_the_forward_body(inputs, loss_graph):
    flat = _flat(inputs)
    rng = np.random.default_rng(5)
    tangents = [rng.standard_normal(np.shape(x)) for x in flat[:10]]
    mask = [k < 10 for k in range(len(flat))]
    plain, _ = jvp_graph(loss_graph, tangent_mask=mask)
    coarse, _ = jvp_graph(coarsen(loss_graph), tangent_mask=mask)
    got, want = eval_graph(coarse, *flat, *tangents), eval_graph(plain, *flat, *tangents)
    assert got[1] == want[1]                               # the same nodes differentiated: bit for bit


def test_the_reverse_rule_reads_the_gradient_body(loss_graph, inputs):
    """Doubling an op's gradient body doubles what reaches its inputs."""
    from tlaloc._core.graph import Graph
    c = coarsen(loss_graph, ops=("cross_entropy",))
    node = next(n for n in c.nodes if n.prim.name == "cross_entropy")
    grad = node.params["grad"]

    from tlaloc._core.builder import Builder
    from tlaloc._core.passes import inline
    b = Builder(name="doubled")
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in grad.inputs]
        doubled = b.finish([2.0 * o for o in inline(grad, ins)])
    params = dict(node.params, grad=specialize(doubled, [v.aval for v in grad.inputs]))
    twice = Graph(c.inputs, tuple(Node(n.prim, n.inputs, n.outputs, params, n.loc) if n is node else n
                                  for n in c.nodes), c.outputs, c.name)
    flat = _flat(inputs)
    g1 = eval_graph(vjp_graph(c)[0], *flat, np.float64(1.0))
    g2 = eval_graph(vjp_graph(twice)[0], *flat, np.float64(1.0))
    np.testing.assert_allclose(g2[1], 2.0 * g1[1], rtol=1e-13)          # d loss / d x


def test_patterns_whose_intermediates_escape_are_left_alone():
    def attention_and_probs(q, k, v):
        s = q @ k.swapaxes(-1, -2)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        return p @ v, p                                    # p is used outside the pattern

    r = np.random.default_rng(1)
    q, k, v = (r.standard_normal((1, 2, 3, 4)) for _ in range(3))
    assert tl.jit(attention_and_probs).lower(q, k, v).recognized == []
    plain = tl.jit(lambda_free_attention).lower(q, k, v).recognized
    assert [(op, a["n_rep"], a["masked"], a["scale"]) for op, a in plain] == [("attention", 1, False, 1.0)]


def lambda_free_attention(q, k, v):
    s = q @ k.swapaxes(-1, -2)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def test_a_claimed_op_becomes_a_custom_call(inputs, monkeypatch):
    from tlaloc.kernels import KernelTemplate, registry
    from tlaloc.kernels.ptx import inst
    fake = KernelTemplate("fake_rmsnorm", lambda k, **shape: inst("ret")).claim(
        "rms_norm", "cpu", when=lambda dim, **_: dim == T.D)
    monkeypatch.setattr(registry, "_templates", [fake])
    assert "custom_call" not in tl.jit(T.block).lower(*inputs[:5]).as_text()      # claiming is off by default
    with registry.opt_in():
        lowered = tl.jit(T.block).lower(*inputs[:5])
    text = lowered.as_text()
    assert text.count('stablehlo.custom_call @tlaloc_fake_rmsnorm') == 2
    assert "api_version = 4" in text
    claimed = [n for n in lowered.emitted_graph.nodes if is_coarsened(n)]
    assert [n.params["claim"] for n in claimed] == ["tlaloc_fake_rmsnorm"] * 2
    assert [op for op, _ in summary(lowered.coarsened)] == BLOCK_OPS


def test_library_kernels_claim_on_a_gpu_target(inputs):
    """The library's PTX kernels claim their ops for nvidia targets (text only: no GPU here)."""
    from tlaloc.kernels import registry
    g = tl.jit(T.loss, recognize=False).lower(*T.make_inputs(np.random.default_rng(0), np.float32)).graph
    c = coarsen(g, gradients=False)
    assert not any(is_coarsened(n) for n in decompose(c, target="nvidia-h100").nodes)     # off by default
    with registry.opt_in():
        d = decompose(c, target="nvidia-h100")
    claims = {n.prim.name: n.params["claim"] for n in d.nodes if is_coarsened(n)}
    assert claims["rms_norm"].startswith("tlaloc_rmsnorm_fwd_")
    assert claims["attention"].startswith("tlaloc_attention_")
    assert claims["cross_entropy"].startswith("tlaloc_cross_entropy_fwd_")
    assert "swiglu" not in claims                           # no kernel claims it: inlined
    text = emit_module(d, name="claimed").text
    assert text.count("stablehlo.custom_call @tlaloc_") == len([n for n in d.nodes if is_coarsened(n)])


def test_patterns_inside_loop_bodies_are_recognized():
    x, w = np.random.default_rng(2).standard_normal((4, 16)), np.ones(16)
    lowered = tl.jit(T.norms_in_a_loop).lower(x, w)
    assert [op for op, _ in lowered.recognized] == ["rms_norm"]
    c = coarsen(lowered.graph)
    d = tl.grad(T.norms_in_a_loop)(x, w)
    g, _ = vjp_graph(c, with_primal=False)
    assert _rel(eval_graph(g, x, w, np.float64(1.0))[0], d) < 1e-12
