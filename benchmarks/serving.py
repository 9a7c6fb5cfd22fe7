"""Serving throughput: aggregate tokens/s with 1, 4 and 16 concurrent requests through ``tlaloc serve``.

    python benchmarks/serving.py [--quick] [--repeats N] [--threads N] [--weights f32|bf16|int8|q8_0|q4_1]
                                 [--activations float32|int8]

The SmolLM2-135M-shaped random checkpoint of llm_inference.py is exported
(``--weights``, default float32; batch buckets 1, 4 and 16, context 128) and served by ``tlaloc serve``
on 127.0.0.1 (a free port) in a child process. For N = 1, 4, 16, N client
threads each send one ``POST /v1/completions`` (a 16-token prompt as token ids,
greedy, ``max_tokens`` 64) at once; throughput is the completion tokens of all
answers (their ``usage``) over the wall time from the first send to the last
answer. Each level is warmed up once (compiling its buckets) before the timed
repeats. ``--quick``: 2 of the 30 layers, 8 new tokens, N = 1 and 4.

No peer: the table reports tlaloc alone (seconds per aggregate token) and the
ratio to one stream. Goal (issue 9): 16 concurrent requests give ≥ 6× the
tokens/s of one stream.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402


def missing() -> list:
    out = []
    try:
        from tlaloc.serving import Engine  # noqa: F401
    except Exception:
        out.append("tlaloc.serving.Engine")
    try:
        from tlaloc import cli
        if "serve" not in cli.command_names():
            out.append("`tlaloc serve`")
    except Exception:
        out.append("`tlaloc serve` (no tlaloc.cli)")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(httpx, url: str, proc, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tlaloc serve exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"tlaloc serve was not healthy after {limit_s:.0f} s")


def burst(httpx, url: str, n: int, new_tokens: int, vocab: int) -> tuple:
    """(wall seconds, completion tokens) for n concurrent requests."""
    import llm_tlaloc as T
    prompts = T._prompts(n, 16, vocab)
    results = [None] * n
    go = threading.Barrier(n + 1)

    def client(k):
        with httpx.Client(timeout=600) as c:
            go.wait()
            r = c.post(url + "/v1/completions", json={"prompt": prompts[k], "max_tokens": new_tokens,
                                                      "temperature": 0.0})
            r.raise_for_status()
            results[k] = r.json()["usage"]["completion_tokens"]

    threads = [threading.Thread(target=client, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if any(r is None for r in results):
        raise RuntimeError("a request failed (see the server's log above)")
    return dt, sum(results)


def run(quick: bool = False, repeats=None, weights: str = "f32", activations: str = "float32"):
    common.print_header(f"7. serving throughput (tlaloc serve, {weights} weights, {activations} activations)")
    gone = missing()
    httpx = common.optional_import("httpx")
    torch = common.optional_import("torch")
    transformers = common.optional_import("transformers")
    if not gone and (httpx is None or torch is None or transformers is None):
        gone = ["httpx, torch or transformers (to build the checkpoint)"]
    if gone:
        common.print_skipped("serving 1/4/16 concurrent requests", f"{' and '.join(gone)} missing")
        return None
    import llm_inference as L
    import llm_tlaloc as T
    levels = (1, 4) if quick else (1, 4, 16)
    new_tokens = 8 if quick else 64
    repeats = repeats or (1 if quick else 3)
    vocab = L.SMOLLM2_135M["vocab_size"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlaloc-bench-serve-") as tmp:
        model, _ = L.build_model(torch, transformers, torch.float32, 2 if quick else 30)
        ckpt = T.save_checkpoint(model, os.path.join(tmp, "hf"))
        del model
        fmt = {"f32": ("f32", None), "bf16": ("bf16", None)}.get(weights, ("f32", weights))
        art, _ = T.export_artifact(ckpt, os.path.join(tmp, "art"), dtype=fmt[0], weights=fmt[1], batch=levels,
                                   context=(128,))
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "tlaloc.cli", "serve", art, "--activations", activations,
                                 "--port", str(port),
                                 "--log-level", "warning"], env=dict(os.environ))
        try:
            _wait_healthy(httpx, url, proc, 600)
            base = None
            for n in levels:
                burst(httpx, url, n, new_tokens, vocab)               # warm-up: compiles this level's buckets
                samples = []
                for _ in range(repeats):
                    dt, toks = burst(httpx, url, n, new_tokens, vocab)
                    samples.append(dt / toks)
                t = common.Timing(samples)
                base = base or t
                note = f"{1 / t.median:.1f} tok/s aggregate, {1 / t.median / (1 / base.median):.2f}× one stream"
                if n == 16:
                    note = f"goal {'met' if base.median / t.median >= 6 else 'missed'}; " + note
                rows.append(common.Row(f"{n} concurrent request{'s' if n > 1 else ''} × {new_tokens} tokens",
                                       {"tlaloc": t}, note=note))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    common.print_table(rows, [])
    print(f"\n(seconds per aggregate token: median ± half the IQR over {repeats} bursts, wall clock)", flush=True)
    return rows


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv, extra=lambda p: (
        p.add_argument("--weights", default="f32"),
        p.add_argument("--activations", default="float32", help="tlaloc serve --activations (int8: Q8_1-style)")))
    run(args.quick, args.repeats, args.weights, args.activations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
