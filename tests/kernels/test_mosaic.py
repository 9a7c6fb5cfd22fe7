"""Mosaic kernels: the emitted tpu_custom_call equals jax.export's; the payload cache;
the reference fallback against Pallas interpret mode; refusals by name."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jax.experimental.pallas")

import tlaloc as tl  # noqa: E402
from tlaloc._core.aval import AbstractValue  # noqa: E402
from tlaloc._core.builder import Builder  # noqa: E402
from tlaloc._core.interpreter import eval_graph  # noqa: E402
from tlaloc.errors import ArgumentError, NoRuleError  # noqa: E402
from tlaloc.kernels.mosaic import CACHE, lower, module_text, mosaic_kernel_p, payload  # noqa: E402

from . import pallas_kernels as P  # noqa: E402

F32 = np.float32
CASES = [  # (kernel, reference, operand avals, kwargs)
    (P.add, P.add_reference, [((8, 128), F32), ((8, 128), F32)], {}),
    (P.rmsnorm, P.rmsnorm_reference, [((16, 256), F32), ((1, 256), F32)], {}),
    (P.matmul, P.matmul_reference, [((256, 128), F32), ((128, 256), F32)], {"bm": 128, "bn": 128}),
]
IDS = ["add", "rmsnorm", "matmul"]


def _custom_calls(text):
    """(attributes, operand types, result types) of every custom_call in a module."""
    from jaxlib.mlir import ir
    from tlaloc._render.stablehlo import mlir_context
    out = []
    with mlir_context():
        module = ir.Module.parse(text)
        for fn in module.body.operations:
            for op in fn.regions[0].blocks[0].operations:
                if op.operation.name == "stablehlo.custom_call":
                    attrs = {op.attributes[i].name: str(op.attributes[i].attr) for i in range(len(op.attributes))}
                    out.append((attrs, [str(v.type) for v in op.operands], [str(r.type) for r in op.results]))
    return out


def _jax_export(kernel, avals, kwargs):
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in avals]
    exported = jax.export.export(jax.jit(lambda *xs: kernel(*xs, **kwargs)), platforms=["tpu"])(*structs)
    return exported.mlir_module()


def _operands(avals, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(d) for s, d in avals]


@pytest.mark.parametrize("kernel,reference,avals,kwargs", CASES, ids=IDS)
def test_emitted_custom_call_equals_jax_export(kernel, reference, avals, kwargs):
    ours = _custom_calls(module_text(payload(kernel, avals, (), kwargs)))
    theirs = _custom_calls(_jax_export(kernel, avals, kwargs))
    assert len(ours) == len(theirs) == 1
    (a, ins, outs), (b, jins, jouts) = ours[0], theirs[0]
    assert a["call_target_name"] == b["call_target_name"] == '"tpu_custom_call"'
    assert a["backend_config"] == b["backend_config"]                 # the payload, byte for byte
    assert a["operand_layouts"] == b["operand_layouts"] and a["result_layouts"] == b["result_layouts"]
    assert a == b and (ins, outs) == (jins, jouts)


def test_payload_holds_the_base64_mosaic_body():
    import base64
    import json
    p = payload(P.add, CASES[0][2])
    body = json.loads(p.backend_config)["custom_call_config"]["body"]
    assert base64.b64decode(body)[:4] == b"ML\xefR"                     # MLIR bytecode magic


@pytest.mark.parametrize("kernel,reference,avals,kwargs", CASES, ids=IDS)
def test_dxir_op_lowers_to_the_same_call(kernel, reference, avals, kwargs):
    from tlaloc._render.stablehlo import Emitter, Val
    b = Builder()
    with b.active():
        ins = [b.new_input(AbstractValue(np.dtype(d), s)) for s, d in avals]
        out = tl.kernels.mosaic_kernel(ins, kernel, reference, kwargs=kwargs)
        graph = b.finish([out])
    (node,) = graph.nodes
    em = Emitter()
    (res,) = lower(em, node, [Val(f"%arg{i}", d, s) for i, (s, d) in enumerate(avals)])
    line = em._blocks[0][0]
    assert '"stablehlo.custom_call"(%arg0, %arg1)' in line
    theirs = _custom_calls(_jax_export(kernel, avals, kwargs))[0][0]
    for name in ("backend_config", "call_target_name", "operand_layouts", "result_layouts"):
        assert f"{name} = {theirs[name]}" in line
    assert (res.dtype, res.shape) == (np.dtype(F32), graph.outputs[0].aval.shape)


@pytest.mark.parametrize("kernel,reference,avals,kwargs", CASES, ids=IDS)
def test_reference_fallback_equals_pallas_interpret_mode(kernel, reference, avals, kwargs):
    xs = _operands(avals)
    got = tl.kernels.mosaic_kernel(xs, kernel, reference, reference_fallback=True, kwargs=kwargs)
    want = np.asarray(kernel(*xs, interpret=True, **kwargs))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_reference_runs_in_the_interpreter_inside_a_graph():
    xs = _operands(CASES[0][2])
    b = Builder()
    with b.active():
        ins = [b.new_input(AbstractValue(np.dtype(F32), (8, 128))) for _ in range(2)]
        out = tl.kernels.mosaic_kernel(ins, P.add, P.add_reference, reference_fallback=True)
        graph = b.finish([out * 2.0])
    (got,) = eval_graph(graph, *xs)
    np.testing.assert_array_equal(got, (xs[0] + xs[1]) * 2)


def test_without_fallback_the_op_is_refused_by_name():
    xs = _operands(CASES[0][2])
    with pytest.raises(NoRuleError, match=r"`mosaic_kernel` \(Pallas kernel `add`\) runs only on TPU"):
        tl.kernels.mosaic_kernel(xs, P.add, P.add_reference)


def test_transforms_refuse_it_by_name():
    for rule, label in (("vjp", "VJP"), ("jvp", "JVP"), ("batch", "batching")):
        with pytest.raises(NoRuleError, match=f"no {label} rule for `mosaic_kernel`"):
            mosaic_kernel_p.rule(rule)


def test_grad_through_it_is_refused_by_name():
    x0 = _operands(CASES[0][2])

    def loss(model, batch):
        return tl.numpy.sum(tl.kernels.mosaic_kernel((model["x"], batch), P.add, P.add_reference,
                                                     reference_fallback=True))
    with pytest.raises(NoRuleError, match="no VJP rule for `mosaic_kernel`"):
        tl.capture({"x": x0[0]}, x0[1], loss).run({"x": x0[0]}, x0[1])


def test_other_targets_lower_the_reference_or_refuse():
    from tlaloc._render.stablehlo import Emitter, Val
    b = Builder()
    with b.active():
        ins = [b.new_input(AbstractValue(np.dtype(F32), (8, 128))) for _ in range(2)]
        out = tl.kernels.mosaic_kernel(ins, P.add, P.add_reference)
        graph = b.finish([out])
    with pytest.raises(NoRuleError, match="no cpu lowering for `mosaic_kernel`"):
        lower(Emitter(), graph.nodes[0], [Val(f"%arg{i}", F32, (8, 128)) for i in range(2)], target="cpu")


def test_payload_cache_key_and_hits():
    CACHE.clear()
    avals = CASES[2][2]
    p1 = payload(P.matmul, avals, (), {"bm": 128, "bn": 128})
    assert CACHE.stats() == {"entries": 1, "hits": 0, "misses": 1}
    assert payload(P.matmul, avals, (), {"bn": 128, "bm": 128}) is p1     # kwargs are sorted
    assert CACHE.hits == 1
    payload(P.matmul, avals, (), {"bm": 64, "bn": 128})                   # new kwargs
    payload(P.matmul, [((128, 128), F32), ((128, 256), F32)], (), {"bm": 128, "bn": 128})   # new shapes
    with jax.default_matmul_precision("highest"):
        payload(P.matmul, avals, (), {"bm": 128, "bn": 128})             # new precision
    assert CACHE.stats() == {"entries": 4, "hits": 1, "misses": 4}
    reasons = [r for _, r in CACHE.log]
    assert reasons[0] == "first use of this kernel"
    assert "new static args or kwargs" in reasons and any("new operand shapes" in r for r in reasons)
    assert any("matmul precision" in r for r in reasons)


def test_array_kwargs_are_refused():
    with pytest.raises(ArgumentError, match="kwarg 'w' of a Mosaic kernel is an array"):
        payload(P.add, CASES[0][2], (), {"w": np.ones(3)})


def test_a_kernel_that_is_not_a_single_pallas_call_is_refused():
    def twice(x, y):
        return P.add(x, y) * 2
    with pytest.raises(ArgumentError, match="must be a single pallas_call"):
        payload(twice, CASES[0][2])
