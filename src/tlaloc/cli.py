"""The ``tlaloc`` command.

    tlaloc export MODEL OUT_DIR [--batch 1,2,4,8] [--context 64,256,1024] [--block-size 16]
                                [--dtype f32|bf16] [--weights int8|q8_0|q4_1|int4|q4_k] [--group 32|64] [--score] [--top-logprobs 20] [--no-cpu-kernels]
    tlaloc generate ARTIFACT --prompt "..." [--max-new-tokens 64] [--chat] [--temperature 0] [--seed S]
    tlaloc embed ARTIFACT --text "..." [--text "..."]
    tlaloc serve ARTIFACT [--host 127.0.0.1] [--port 8000] [--api-key KEY]
    tlaloc export-triton ARTIFACT REPO_DIR [--model-name NAME] [--streaming] [--copy|--link]
    tlaloc bench [--quick] [--clock cpu] [--threads 1] [--only eager jit ...] [--llamacpp]
    tlaloc launch -n N script.py [ARGS...]      (N processes of a multi-process run; tlaloc.launch)

The serving commands import their modules only when run, so ``tlaloc --help`` stays
fast. ``bench`` runs ``benchmarks/run_all.py`` of the tlaloc checkout this package
is installed from (or the one in the current directory) in a fresh Python
process, and passes its exit code on. Other commands (``serve``) are added by
their own issues, one function per command below.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(help="tlaloc: differentiable array programs by source transformation.",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _root() -> None:
    """tlaloc: differentiable array programs by source transformation."""


def _benchmarks_dir() -> Optional[Path]:
    """``benchmarks/`` of the checkout: next to ``src/`` of this package, else under the cwd."""
    here = Path(__file__).resolve().parent                  # .../src/tlaloc
    for root in (here.parent.parent, Path.cwd()):
        candidate = root / "benchmarks" / "run_all.py"
        if candidate.is_file():
            return candidate.parent
    return None


@app.command()
def bench(quick: bool = typer.Option(False, "--quick", help="small sizes, few repeats: a smoke run"),
          repeats: Optional[int] = typer.Option(None, help="repeats per implementation"),
          clock: str = typer.Option("wall", help="wall, or cpu (process CPU time; steadier on a loaded machine)"),
          threads: Optional[int] = typer.Option(None, help="limit BLAS, XLA and torch to N threads"),
          only: Optional[List[str]] = typer.Option(None, help="run only this section (repeatable): "
                                                   "eager, jit, definition, training, llm, serving, llamacpp"),
          llamacpp: bool = typer.Option(False, "--llamacpp", help="also run tlaloc against llama.cpp on the SmolLM2 "
                                        "GGUF (needs the `bench` extra: xllamacpp)")) -> None:
    """Benchmarks side by side with autograd, NumPy, JAX, PyTorch and transformers (issue 9)."""
    where = _benchmarks_dir()
    if where is None:
        typer.echo("tlaloc bench: benchmarks/run_all.py not found; run it from a tlaloc checkout "
                   "(the benchmarks are not part of the installed package)", err=True)
        raise typer.Exit(2)
    cmd = [sys.executable, str(where / "run_all.py"), "--clock", clock]
    if quick:
        cmd.append("--quick")
    if repeats is not None:
        cmd += ["--repeats", str(repeats)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    if only:
        cmd += ["--only", *only]
    if llamacpp:
        cmd.append("--llamacpp")
    raise typer.Exit(subprocess.call(cmd, env=dict(os.environ)))


def _fail(message: str, code: int = 2):
    typer.echo(f"tlaloc: {message}", err=True)
    raise typer.Exit(code)


#: serve and generate: which program texts run
_RUN_CPU_KERNELS = typer.Option(None, "--cpu-kernels/--no-cpu-kernels",
                                help="run the artifact's CPU-kernel programs where it has them (default: "
                                     "where the CPU has AVX-512, on which they beat XLA's dots; else, or "
                                     "without a C++ compiler: the portable programs)",
                                show_default=False)


#: serve and generate: whether the next decode call starts while one runs
_RUN_ASYNC = typer.Option(True, "--async-scheduling/--no-async-scheduling",
                          help="start a steady decode call on the running one's tokens before they reach the "
                               "host (vLLM's async scheduling; the same tokens)")


#: serve and generate: what the CPU kernels' products by quantised weights take as x
_RUN_ACTIVATIONS = typer.Option("float32", "--activations",
                                help="float32 (exact) or int8: x quantised per block of 32 before the CPU "
                                     "kernels' products by Q4_1, Q8_0 and int8 weights, as llama.cpp's Q8 "
                                     "activations (faster; logits change by the rounding)")


def _kernels(flag: Optional[bool]):
    """The --cpu-kernels/--no-cpu-kernels flag as Engine's cpu_kernels (unset: "auto")."""
    return "auto" if flag is None else flag


def _load(artifact: str, cpu_kernels: Optional[bool] = None, async_scheduling: bool = True,
          activations: str = "float32"):
    from tlaloc.errors import TlalocError
    from tlaloc.serving import Engine
    try:
        return Engine(str(artifact), cpu_kernels=_kernels(cpu_kernels), async_scheduling=async_scheduling,
                      activations=activations)
    except (TlalocError, RuntimeError, OSError, ValueError) as exc:
        _fail(f"cannot load {artifact}: {exc}")


@app.command()
def export(model: str = typer.Argument(..., help="a Hugging Face folder or a .gguf file"),
           out_dir: str = typer.Argument(..., help="the artifact directory to create"),
           batch: str = typer.Option("1,2,4,8", help="batch-size ladder"),
           context: str = typer.Option("64,256,1024", help="context-length ladder (multiples of --block-size)"),
           block_size: int = typer.Option(16, help="token slots per KV page"),
           dtype: str = typer.Option("f32", help="f32 or bf16: weights and KV pools as stored"),
           weights: Optional[str] = typer.Option(None, help="int8: per-output-channel int8 weights; q8_0: GGUF Q8_0 blocks; q4_1: GGUF Q4_1 blocks; "
                                                        "int4: 4-bit with a scale and minimum per --group rows; q4_k: a "
                                                        "GGUF's Q4_K blocks (and Q6_K, Q8_0 layer matrices) kept exactly"),
           group: Optional[int] = typer.Option(None, help="input rows per scale of --weights int4: 32 (default) or 64"),
           prefill_chunk: Optional[int] = typer.Option(None, help="most prompt tokens per request per prefill "
                                                       "step (default min(256, largest context))"),
           prefill_tokens: Optional[str] = typer.Option(None, help="prefill program sizes in tokens per row, e.g. "
                                                        "16,64 (default 16,64,... below the chunk); a prompt "
                                                        "runs in the smallest that holds it"),
           name: Optional[str] = typer.Option(None, help="the model name the artifact reports"),
           overwrite: bool = typer.Option(False, "--overwrite",
                                          help="replace an earlier artifact (or an empty directory) at OUT_DIR"),
           score: bool = typer.Option(False, "--score", help="also write score programs (per-token "
                                      "log-probabilities: Engine.score, tlaloc.serving.perplexity)"),
           top_logprobs: int = typer.Option(20, help="most top log-probabilities a request may ask for "
                                            "(OpenAI logprobs); 0 leaves them out of the programs"),
           cpu_kernels: bool = typer.Option(True, "--cpu-kernels/--no-cpu-kernels",
                                            help="also write program texts whose products by stored weights "
                                                 "call tlaloc's CPU kernels (run on CPU when they build)")) -> None:
    """Export a model to a serving artifact (StableHLO programs, weights, tokenizer, manifest)."""
    try:
        from tlaloc.serving.export import export as export_artifact
    except ImportError as exc:
        _fail(f"export is not available in this build: {exc}")
    from tlaloc.errors import TlalocError
    try:
        summary = export_artifact(model, out_dir, batch=batch, context=context, block_size=block_size,
                                  dtype=dtype, weights=weights, group=group, prefill_chunk=prefill_chunk,
                                  prefill_tokens=prefill_tokens, name=name, overwrite=overwrite, score=score,
                                  top_logprobs=top_logprobs, cpu_kernels=cpu_kernels)
    except (TlalocError, OSError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"wrote {summary.path}: {summary.kind}, {summary.num_programs} programs, "
               f"{summary.weight_bytes / 2**20:.1f} MiB of weights, {summary.total_bytes / 2**20:.1f} MiB "
               f"in all, {summary.seconds:.1f} s")
    for note in summary.notes:
        typer.echo(f"note: {note}", err=True)


@app.command()
def generate(artifact: str = typer.Argument(..., help="an artifact directory (tlaloc export)"),
             prompt: str = typer.Option(..., help="the prompt text"),
             max_new_tokens: int = typer.Option(64, help="tokens to generate at most"),
             chat: bool = typer.Option(False, "--chat", help="wrap the prompt in the model's chat template"),
             temperature: float = typer.Option(0.0, help="0 is greedy"),
             top_k: Optional[int] = typer.Option(None), top_p: Optional[float] = typer.Option(None),
             seed: Optional[int] = typer.Option(None), cpu_kernels: Optional[bool] = _RUN_CPU_KERNELS,
             async_scheduling: bool = _RUN_ASYNC, activations: str = _RUN_ACTIVATIONS) -> None:
    """Generate text for a prompt, streamed to the terminal as it is made."""
    import time

    from tlaloc.serving.runtime.detok import TextStream
    from tlaloc.serving.runtime.loop import EngineLoop
    from tlaloc.serving.server.openai_schema import OpenAIError
    from tlaloc.serving.server.prompts import chat_prompt
    engine = _load(artifact, cpu_kernels, async_scheduling, activations)
    if engine.kind != "decoder":
        _fail(f"{artifact} is an encoder artifact; use `tlaloc embed`")
    if engine.tokenizer is None:
        _fail(f"{artifact} has no tokenizer (its model had none), so it cannot encode --prompt text: re-export "
              f"from a checkpoint with a tokenizer, or serve it and send token ids (`tlaloc serve`)")
    text = prompt
    if chat:
        try:
            text = chat_prompt(engine, [{"role": "user", "content": prompt}])
        except OpenAIError as exc:
            _fail(exc.message)
    ids = list(engine.tokenizer.encode(text, add_special_tokens=not chat).ids)
    stream, failed = TextStream(engine.tokenizer), []

    def show(event):
        if event.error:
            failed.append(event.error)
            return
        sys.stdout.write(stream.push(event.token_ids) + (stream.finish() if event.finished else ""))
        sys.stdout.flush()

    loop = EngineLoop(engine)
    try:
        loop.submit(ids, show, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                    seed=seed, stop_ids=tuple(getattr(engine, "eos_token_ids", None) or ()))
    except ValueError as exc:
        _fail(str(exc))
    start = time.perf_counter()
    while loop.live:
        loop.step()
    if failed:
        _fail(f"generation failed: {failed[0]}", 1)
    count = len(stream.token_ids)
    seconds = time.perf_counter() - start
    typer.echo("")
    typer.echo(f"[{count} tokens in {seconds:.2f} s, {count / max(seconds, 1e-9):.1f} tokens/s]", err=True)


@app.command()
def embed(artifact: str = typer.Argument(..., help="an encoder artifact directory"),
          text: List[str] = typer.Option(..., help="a text to embed (repeatable)")) -> None:
    """Embed texts with an encoder artifact and print a summary of each vector."""
    import numpy as np
    engine = _load(artifact)
    if engine.kind != "encoder":
        _fail(f"{artifact} is a decoder artifact; use `tlaloc generate`")
    try:
        vectors = np.asarray(engine.embed(list(text)))                     # (n, dim)
    except ValueError as exc:
        _fail(str(exc))
    for item, vector in zip(text, vectors):
        head = ", ".join(f"{x:+.4f}" for x in vector[:6])
        typer.echo(f"{item[:40]!r}: dim {vector.shape[0]}, norm {np.linalg.norm(vector):.4f}, [{head}, ...]")
    if len(vectors) > 1:
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        typer.echo("cosine similarities:\n" + np.array2string(unit @ unit.T, precision=4))


@app.command()
def serve(artifact: str = typer.Argument(..., help="an artifact directory (tlaloc export)"),
          host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
          port: int = typer.Option(8000, help="TCP port"),
          api_key: Optional[str] = typer.Option(None, envvar="TLALOC_API_KEY",
                                                help="require 'Authorization: Bearer KEY' (all but /health). "
                                                     "Prefer the TLALOC_API_KEY environment variable: a key on "
                                                     "the command line shows in `ps`"),
          log_level: str = typer.Option("info", help="uvicorn log level"),
          max_waiting: int = typer.Option(1024, help="queued sequences beyond which requests get 429"),
          max_request_bytes: int = typer.Option(4 * 1024 * 1024, help="largest request body (413 above)"),
          max_prompts: int = typer.Option(64, help="most prompts in one completion request"),
          max_embedding_inputs: int = typer.Option(2048, help="most texts in one embeddings request"),
          max_n: int = typer.Option(16, help="largest 'n' (choices per prompt)"),
          max_sequences: int = typer.Option(64, help="most sequences (prompts x n) in one request"),
          max_stop: int = typer.Option(4, help="most stop strings in one request"),
          max_stop_chars: int = typer.Option(256, help="longest stop string"),
          header_timeout: float = typer.Option(10.0, help="seconds a connection may take to send request headers"),
          body_timeout: float = typer.Option(30.0, help="seconds a request body may stall (408 after)"),
          keep_alive: float = typer.Option(5.0, help="seconds an idle keep-alive connection is kept"),
          max_header_bytes: int = typer.Option(16 * 1024, help="largest request header block"),
          cpu_kernels: Optional[bool] = _RUN_CPU_KERNELS, async_scheduling: bool = _RUN_ASYNC,
          activations: str = _RUN_ACTIVATIONS) -> None:
    """Serve an artifact over an OpenAI-compatible HTTP API (completions, chat, embeddings, /metrics).

    The limits and their defaults are described in ``tlaloc.serving.server.limits``.
    """
    from tlaloc.errors import TlalocError
    from tlaloc.serving import Engine
    from tlaloc.serving.server import ServerLimits, run_server
    try:
        limits = ServerLimits(max_request_bytes=max_request_bytes, max_prompts=max_prompts,
                              max_embedding_inputs=max_embedding_inputs, max_n=max_n,
                              max_sequences=max_sequences, max_stop=max_stop, max_stop_chars=max_stop_chars,
                              header_timeout_s=header_timeout, body_timeout_s=body_timeout,
                              keep_alive_s=keep_alive, max_header_bytes=max_header_bytes)
    except ValueError as exc:
        _fail(str(exc))
    try:
        engine = Engine(str(artifact), max_waiting=max_waiting, cpu_kernels=_kernels(cpu_kernels),
                        async_scheduling=async_scheduling, activations=activations)
    except (TlalocError, RuntimeError, OSError, ValueError) as exc:
        _fail(f"cannot load {artifact}: {exc}")
    run_server(engine, host=host, port=port, api_key=api_key, log_level=log_level, limits=limits)


@app.command("export-triton")
def export_triton(artifact: str = typer.Argument(..., help="an artifact directory (tlaloc export)"),
                  repo_dir: str = typer.Argument(..., help="the Triton model repository to write into"),
                  model_name: Optional[str] = typer.Option(None, help="Triton model name (default: from "
                                                           "the artifact's manifest or folder name)"),
                  streaming: bool = typer.Option(False, "--streaming", help="decoupled model: one "
                                                 "response per token batch (gRPC streaming)"),
                  max_batch_size: int = typer.Option(8, help="Triton dynamic-batching limit"),
                  link: bool = typer.Option(False, "--link", help="point at ARTIFACT instead of copying it"),
                  text_tensors: str = typer.Option("string", help="string: TYPE_STRING text tensors (Triton's "
                                                   "convention); utf8: TYPE_UINT8 UTF-8 bytes, for Python-backend "
                                                   "stubs built for NumPy 1.x (nvidia-pytriton <= 0.7)")) -> None:
    """Write a Triton model repository (Python backend) that serves an artifact."""
    from tlaloc.serving.triton import write_repository
    if text_tensors not in ("string", "utf8"):
        _fail(f"--text-tensors must be 'string' or 'utf8', not {text_tensors!r}")
    try:
        path = write_repository(artifact, repo_dir, model_name=model_name, streaming=streaming,
                                max_batch_size=max_batch_size, copy_artifact=not link, text_tensors=text_tensors)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"wrote Triton model {path}; serve with: tritonserver --model-repository {repo_dir}")


@app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
def launch(script: str = typer.Argument(..., help="a Python script (or -m MODULE) run by every process"),
           args: Optional[List[str]] = typer.Argument(None, help="the script's arguments"),
           nprocs: int = typer.Option(..., "-n", "--nprocs", help="how many processes"),
           port: Optional[int] = typer.Option(None, help="the coordinator's port on 127.0.0.1 (default: a free one)"),
           grace: float = typer.Option(5.0, help="seconds between SIGTERM and SIGKILL when stopping the others"),
           timeout: Optional[float] = typer.Option(None, help="stop every process after this many seconds")) -> None:
    """Start N processes of a script on this machine (tlaloc.distributed; see tlaloc.launch)."""
    from .launch import launch as run
    head = [sys.executable, "-m", *(args or [])[:1]] if script == "-m" else [sys.executable, script]
    rest = (args or [])[1:] if script == "-m" else list(args or [])
    raise typer.Exit(run(head + rest, nprocs, port=port, grace=grace, timeout=timeout))


def command_names() -> list:
    """Names of the registered commands (the benchmarks use it to see whether ``serve`` exists)."""
    return [c.name or c.callback.__name__ for c in app.registered_commands]


def main() -> None:
    app()


if __name__ == "__main__":
    main()
