"""``Engine(artifact_dir)``: serve an exported artifact with PJRT, without the compiler.

    engine = Engine("smol-art")
    [r] = engine.generate(["The capital of France is"], max_new_tokens=16)
    r.token_ids, r.text

    rid = engine.submit(ids, max_new_tokens=64, temperature=0.7, seed=1)   # streaming
    while engine.has_work():
        for event in engine.step():        # Event(request_id, token_ids, finished, finish_reason, error)
            ...

This module imports numpy, safetensors, tokenizers, the PJRT runtime
(``tlaloc._runtime.pjrt``, i.e. jaxlib's client) and the manifest code, never the
front ends, transforms or emitter (``tests/serving/test_runtime_imports.py`` runs it
under an import guard). Loading checks the manifest's schema and every file's sha256;
the :class:`~tlaloc.serving.runtime.executor.Executor` then holds the weights, KV pools
and compiled programs on the device.

A step is vLLM v1's engine step: the scheduler decides a call
(:meth:`~tlaloc.serving.runtime.scheduler.Scheduler.schedule`), its inputs are built
(:mod:`tlaloc.serving.runtime.batch`), the executor runs it, and the scheduler applies the
sampled tokens (:meth:`~tlaloc.serving.runtime.scheduler.Scheduler.update`). One
request's fault fails only that request: a row whose inputs cannot be built fails alone,
and when a program call fails with the KV pools intact its rows are re-run one at a time
so that only the row at fault fails. Only a failure that consumed the donated pools ends
every running request (with new pools, serving goes on).

With async scheduling (the default) a steady decode call (the same requests as the call
before, nothing waiting) is started while the one before it still runs, on that call's
tokens as they are on the device, and the step then applies the earlier call: the host's
part of a step overlaps the program. A call that fails in flight is applied not at all and
its rows are re-run, waited for, under the rules above. A call in flight that runs a request
which has ended since (a stop id in the call before it, a cancel) is dropped and its other rows
re-run when the waiting engine would have run them in another bucket or other places, so every
call applied is the waiting engine's (bit for bit its outputs). The uniforms drawn for a
dropped call are drawn again, equal, for its re-run: seeded samples do not depend on either.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time

import numpy as np

from .. import manifest as mf
from ..errors import ArgumentError, ArtifactError, CapacityError, QueueFullError
from .batch import MODES, Batch, clear_row, empty_inputs, fill_row, take_row
from .executor import Executor, compiled_count
from .loop import EngineLoop
from . import requests as rq
from .requests import Event
from .scheduler import Scheduler

log = logging.getLogger("tlaloc.serving")


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """New token ids (prompt excluded), their text, and why generation stopped ("stop", "length", "error")."""
    token_ids: list
    text: str
    finish_reason: str


class Engine:
    """A loaded artifact: weights and KV pools on the device, programs compiled on demand.

    Args:
      artifact_dir: a directory written by ``tlaloc.serving.export.export``.
      platform: the PJRT platform ("cpu", or "cuda" where the plugin and a GPU exist).
      prefill_chunk: prompt tokens per request per step (default and maximum: the
        artifact's ``prefill_chunk``).
      max_waiting: queued requests beyond which ``submit`` refuses (QueueFullError).
      verify: check every file's sha256 on load (programs are re-checked when compiled).
      precompile: compile every program now instead of on first use.
      fast_compile: compile with XLA's backend optimisation level 0 (several times faster to
        compile, slower to run; for tests and quick looks).
      cache_dir: keep compiled executables here (default: ``$TLALOC_SERVING_CACHE``; none if
        unset), keyed by the program's cache key, platform, options and jaxlib version, so a
        restart loads them instead of compiling. Use a directory only you can write.
      cpu_kernels: ``"auto"`` (default): on the CPU platform, run the programs' CPU-kernel
        variants where the artifact has them and the CPU has AVX-512, where they beat XLA's
        dots (products by stored weights as ``tlaloc._runtime.cpu_kernels``'s C++ kernels,
        built with the host's C++ compiler on first use; ``cpu_kernels.pays``); True: wherever
        they build; False, or no compiler, or ``TLALOC_CPU_KERNELS=0``: the portable programs.
        ``engine.executor.cpu_kernels`` says which runs. Other values raise ArgumentError.
      activations: what the CPU kernels' products by Q4_1, Q8_0 and int8 weights take as x.
        ``"float32"`` (default): x itself, every product exact (matmul.cc's header). ``"int8"``:
        x quantised per row and block of 32 inputs to int8 with a float32 scale
        d = max|x| / 127, |x - d q| <= d / 2, and multiplied by the weights' integers with integer
        dot products, as llama.cpp multiplies its quantised weights by Q8 activations (ggml's
        ``quantize_row_q8_1``); 2-5x faster products on an AVX2 CPU, and logits that differ from
        float32's by the activations' rounding (greedy ids may diverge: see
        ``benchmarks/quantization.py``), prompts included. On a CPU without AVX-512 it also lets
        ``cpu_kernels="auto"`` run the kernels for every program whose products all have int8
        kernels (prefill and scoring too), and for the decode steps of up to
        ``cpu_kernels.X8_DECODE_ROWS`` rows that also have float32 products. Where no kernel runs (another
        platform, no compiler), the artifact has no Q4_1, Q8_0 or int8 weight, or such a weight's
        input width is not a multiple of 32, float32 runs (logged); ``engine.executor.activations``
        says which. Other values raise ArgumentError.

    Raises ArtifactError for a missing, tampered or unknown-schema artifact.
    """

    def __init__(self, artifact_dir, *, platform: str = "cpu", prefill_chunk: int | None = None,
                 max_waiting: int = 1024, verify: bool = True, precompile: bool = False,
                 fast_compile: bool = False, cache_dir: str | None = None, cpu_kernels: bool | str = "auto",
                 async_scheduling: bool = True, activations: str = "float32"):
        if not rq.is_int(max_waiting) or max_waiting < 1:
            raise rq.arg_error("max_waiting", f"max_waiting must be a positive integer (queued requests beyond "
                                              f"which submit refuses), got {max_waiting!r}")
        self.fast_compile = bool(fast_compile)
        self.cache_dir = cache_dir if cache_dir is not None else os.environ.get("TLALOC_SERVING_CACHE") or None
        self.path = os.fspath(artifact_dir)
        t0 = time.perf_counter()
        self.verify = bool(verify)
        m = self.manifest = mf.read_manifest(self.path, verify=False)
        if self.verify:                   # every file but the weights, which are hashed from the bytes uploaded
            for rel, entry in sorted(m["files"].items()):
                if rel != m["weights"]["file"]:
                    mf.verify_file(self.path, rel, entry)
        self.kind: str = m["kind"]
        self.model_name: str = m["model"]["name"]
        self.config: dict = m["model"]["config"]
        self.vocab_size: int = int(self.config["vocab_size"])
        self.eos_token_ids: tuple = tuple(self.config.get("eos_token_ids") or ())
        self.max_context: int = int(m["buckets"]["context"][-1])
        #: the most top log-probabilities a request may ask for (0: the programs do not output them)
        self.max_logprobs: int = int((m.get("logprobs") or {}).get("top", 0))
        self.platform = platform
        self.async_scheduling = bool(async_scheduling)
        self._inflight = None             # (decode Batch, its device outputs): started, not yet applied
        self._wait_next = False           # after an in-flight call failed: the step's calls are waited for
        self._lock = threading.RLock()
        self._special = {"bos_token": "", "eos_token": ""}
        self.tokenizer, self.chat_template = self._load_tokenizer()
        self.executor = Executor(self.path, m, platform=platform, verify=self.verify, fast_compile=self.fast_compile,
                                 cache_dir=self.cache_dir, cpu_kernels=cpu_kernels, activations=activations)
        self.scheduler = None
        if self.kind == "decoder":
            kv = m["kv"]
            self.block_size, self.num_pages = int(kv["block_size"]), int(kv["num_pages"])
            self.executor.new_pools()
            chunk = int(m["buckets"]["prefill_chunk"])
            if prefill_chunk is not None and not 1 <= int(prefill_chunk) <= chunk:
                raise ArgumentError(f"prefill_chunk={prefill_chunk}: this artifact's prefill programs take at most "
                                    f"{chunk} tokens per row; use 1..{chunk}")
            smallest = m["buckets"]["batch"][0]
            tokens = {(mode, C): self.executor.tokens(mode, smallest, C) for mode in ("prefill", "decode")
                      for C in m["buckets"]["context"]}
            self.scheduler = Scheduler(
                batch=m["buckets"]["batch"], context=m["buckets"]["context"], block_size=self.block_size,
                program_tokens=lambda mode, C: tokens[mode, C],
                num_pages=self.num_pages, prefill_chunk=int(prefill_chunk or chunk), vocab_size=self.vocab_size,
                max_waiting=max_waiting, max_logprobs=self.max_logprobs)
        elif self.kind != "encoder":
            raise ArtifactError(f"{self.path}: kind={self.kind!r}; this runtime serves 'decoder' and 'encoder'")
        if precompile:
            for key in sorted(self.executor.programs):
                self.executor.executable(*key)
        log.info("engine: loaded %s (%s, %d programs) in %.2f s", self.path, self.kind, len(self.executor.programs),
                 time.perf_counter() - t0)

    # -- loading ---------------------------------------------------------------------------------
    def _load_tokenizer(self):
        tok = self.manifest.get("tokenizer")
        if not tok:
            return None, None
        from tokenizers import Tokenizer
        tokenizer = Tokenizer.from_file(mf.resolve(self.path, tok["file"]))
        self._special = {"bos_token": tok.get("bos_token") or "", "eos_token": tok.get("eos_token") or ""}
        return tokenizer, tok.get("chat_template")

    def kv_pool_pointers(self) -> list:
        """The device buffer address of every KV pool (donation keeps them fixed across steps)."""
        return self.executor.kv_pool_pointers()

    @property
    def programs_used(self) -> set:
        """(mode, batch, context, tokens per row) of every decode and prefill program this engine has run."""
        return self.executor.programs_used

    # -- one step: schedule, build the inputs, run, update -----------------------------------------
    def _run_batch(self, batch: Batch, defer: bool = False) -> list[Event]:
        """Run one scheduled call. A row whose inputs cannot be built fails alone; see :meth:`_call`.
        ``defer``: start the call and keep it in flight (applied at the next step) instead of waiting."""
        events, rows = [], []
        inputs = empty_inputs(batch.size, batch.tokens, batch.context // self.block_size)
        for row in batch.rows:
            k = len(rows)                                    # the rows that failed leave no gap
            try:
                fill_row(inputs, k, row, self.block_size)
                rows.append(row)
            except Exception as e:  # noqa: BLE001 - this request's values; never the batch's problem
                clear_row(inputs, k)                         # what it half wrote must not reach the next row
                events.append(self.scheduler.fail_row(row, e, "while its inputs were built"))
        if rows:
            size = self.scheduler.bucket(self.scheduler.batch, len(rows), "batch")
            if size < batch.size:                            # rows failed: a smaller bucket holds the rest
                inputs = {name: a[:size] for name, a in inputs.items()}
            batch = batch.with_rows(rows, size)
            if defer and len(rows) == len(batch.rows) and self._start(batch, inputs):
                return events
            events.extend(self._call(batch, inputs))
        return events

    # -- async scheduling: a decode call in flight across steps -------------------------------------
    def _start(self, batch: Batch, inputs: dict) -> bool:
        """Start ``batch`` without waiting and keep it in flight; False (nothing started, no page or
        draw undone) if it could not start, so the caller runs it as usual."""
        try:
            results = self.executor.dispatch(batch.mode, batch.size, batch.context, inputs, batch.tokens)
        except Exception as e:  # noqa: BLE001 - run it the usual way, which handles the failure
            log.info("serving: async scheduling: could not start the %s call: %s: %s", batch.mode,
                     type(e).__name__, e)
            return False
        self.scheduler.count_call(batch)
        self._inflight = (batch, results)
        return True

    def _continue(self, prev: Batch, results: dict) -> bool:
        """Start the decode call after ``prev`` (in flight, outputs ``results``) on ``prev``'s tokens as
        they are on the device, if the scheduler knows it already (:meth:`Scheduler.next_decode`)."""
        batch = self.scheduler.next_decode(prev)
        if batch is None:
            return False
        inputs = empty_inputs(batch.size, batch.tokens, batch.context // self.block_size)
        for k, row in enumerate(batch.rows):
            fill_row(inputs, k, row, self.block_size, tokens=False)
        try:
            inputs["token_ids"] = self.executor.tokens_from_ids(results["next_token_ids"])
        except Exception as e:  # noqa: BLE001 - the step goes on without it
            log.info("serving: async scheduling: %s: %s", type(e).__name__, e)
            self.scheduler.undo_draws(batch)                 # the next step schedules these rows again
            return False
        if not self._start(batch, inputs):
            self.scheduler.undo_draws(batch)
            return False
        return True

    def _stale(self, batch: Batch) -> bool:
        """Whether in-flight ``batch`` runs a request that has ended since it started (a stop id in the
        call before it, a cancel) and the waiting engine would have run the others in another call:
        a smaller bucket, or rows in other places. Its outputs would then differ from the waiting
        engine's in the last bits (its logprobs; its tokens at near ties), so it is dropped and its
        live rows re-run. A call whose ended rows come last in the same bucket is the waiting
        engine's call with a padding row computed, and is kept (:meth:`Scheduler.update` skips them)."""
        running = set(map(id, self.scheduler.running))
        live = [row for row in batch.rows if id(row.request) in running]
        if not live or len(live) == len(batch.rows):
            return False
        if any(a is not b for a, b in zip(live, batch.rows)):
            return True
        sched = self.scheduler
        return (sched.bucket(sched.batch, len(live), "batch") != batch.size
                or sched.bucket(sched.context, max(row.end for row in live), "context") != batch.context)

    def _drop(self, batch: Batch, results: dict) -> bool:
        """Drop an in-flight call unapplied: wait for it and undo its rows' draws. Returns
        whether the KV pools are intact afterwards (see :meth:`_pools_intact`)."""
        try:
            self.executor.collect(results)
        except Exception:  # noqa: BLE001 - nothing of it is used
            pass
        self.scheduler.undo_draws(batch)
        return self._pools_intact()

    def _apply(self, batch: Batch, results: dict) -> list[Event] | None:
        """Wait for an in-flight call and apply its tokens; None if it failed (nothing applied: the
        scheduler still stands before it, so the step re-runs its rows the usual way)."""
        try:
            sampled = self.executor.collect(results)
        except Exception as e:  # noqa: BLE001 - handled by the caller
            log.warning("serving: %s program (batch %d, context %d, %d rows) failed: %s: %s", batch.mode,
                        batch.size, batch.context, len(batch.rows), type(e).__name__, e)
            return None
        return self.scheduler.update(batch, sampled)

    def _step_in_flight(self) -> tuple:
        """The in-flight call's part of a step: start the next decode call if it is known, then apply
        the one in flight. Returns (its events, whether a call is in flight again)."""
        (prev, results), self._inflight = self._inflight, None
        if self._stale(prev):                                # a request of it was cancelled: the waiting
            if self._drop(prev, results):                    # engine runs the others without it
                return [], False
            self.executor.new_pools()
            return self.scheduler.fail_all("the KV cache was lost when a program failed; resubmit the request"), False
        self._continue(prev, results)
        events = self._apply(prev, results)
        if events is not None:
            if self._inflight is not None and self._stale(self._inflight[0]):   # prev ended one of its
                later, self._inflight = self._inflight, None                    # requests (a stop id)
                if not self._drop(*later):
                    self.executor.new_pools()
                    events.extend(self.scheduler.fail_all("the KV cache was lost when a program failed; "
                                                          "resubmit the request"))
            return events, self._inflight is not None
        if self._inflight is not None:                       # it ran on the failed call's tokens: drop it
            later, self._inflight = self._inflight, None
            try:
                self.executor.collect(later[1])
            except Exception:  # noqa: BLE001 - expected: its input was the failed call's output
                pass
            self.scheduler.undo_draws(later[0])
        self.scheduler.undo_draws(prev)                      # the re-run draws prev's uniforms again
        if not self._pools_intact():
            self.executor.new_pools()
            return self.scheduler.fail_all("the KV cache was lost when a program failed; resubmit the request"), False
        self._wait_next = True                               # the step re-runs the rows and waits: a
        return [], False                                     # fault fails its row alone (see _call)

    def _pools_intact(self) -> bool:
        """Whether every KV pool holds a value (not consumed, not the output of a failed call)."""
        try:
            for pool in self.executor.pools.values():
                if pool.is_deleted():
                    return False
                pool.block_until_ready()
        except Exception:  # noqa: BLE001 - a failed call's output raises its error
            return False
        return True

    def _settle(self) -> None:
        """Wait for a call still in flight and drop it (every request it ran has ended)."""
        if self._inflight is not None:
            (batch, results), self._inflight = self._inflight, None
            try:
                self.executor.collect(results)
            except Exception:  # noqa: BLE001 - nothing depends on it
                if not self._pools_intact():
                    self.executor.new_pools()
                    self.scheduler.fail_all("the KV cache was lost when a program failed; resubmit the request")

    def _call(self, batch: Batch, inputs: dict) -> list[Event]:
        """One program call on ``inputs`` (the batch arrays, row k for ``batch.rows[k]``). If it fails and
        the KV pools survived, each row is re-run alone so that only the row at fault fails (re-running
        writes the same keys and values and reuses the drawn uniforms); if the call consumed the donated
        pools, new ones are made and every running request ends with an error."""
        self.scheduler.count_call(batch)
        try:
            sampled = self.executor.run(batch.mode, batch.size, batch.context, inputs, batch.tokens)
        except Exception as e:  # noqa: BLE001 - the program failed: keep serving
            log.warning("serving: %s program (batch %d, context %d, %d rows) failed: %s: %s", batch.mode,
                        batch.size, batch.context, len(batch.rows), type(e).__name__, e)
            if self.executor.pools_lost():
                self.executor.new_pools()
                return self.scheduler.fail_all("the KV cache was lost when a program failed; resubmit the request")
            if len(batch.rows) > 1:
                alone = self.scheduler.batch[0]
                return [ev for k, row in enumerate(batch.rows)
                        for ev in self._call(batch.with_rows([row], alone), take_row(inputs, k, alone))]
            return [self.scheduler.fail_row(batch.rows[0], e)]
        return self.scheduler.update(batch, sampled)

    # -- streaming API ---------------------------------------------------------------------------
    def _decoder(self, what: str):
        if self.scheduler is None:
            raise ArgumentError(f"{what}: {self.path} is an encoder artifact; use embed()")
        return self.scheduler

    def submit(self, prompt_ids, *, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
               top_p: float | None = None, seed=None, stop_ids=(), request_id: str | None = None,
               logprobs: int | None = None) -> str:
        """Queue a request; returns its id. It joins the running batch at the next step.

        prompt_ids: token ids (list of int). seed: an int (or tuple of ints) seeds the request's
        own generator (so its samples do not depend on its batch); None draws fresh entropy.
        stop_ids: token ids that end the request (included in its output). logprobs: None, or
        0..``max_logprobs``: each event then carries ``logprobs``, one
        :class:`~tlaloc.serving.runtime.requests.TokenLogprobs` per token (that many top entries);
        an artifact exported with ``top_logprobs=0`` refuses it (ArgumentError, ``param`` logprobs).

        Raises CapacityError (prompt + max_new_tokens over the largest context, or more pages
        than the artifact has), QueueFullError (the queue is full), ArgumentError (bad ids or
        sampling settings).
        """
        with self._lock:
            return self._decoder("submit").submit(prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                                  top_k=top_k, top_p=top_p, seed=seed, stop_ids=stop_ids,
                                                  request_id=request_id, logprobs=logprobs)

    def step(self) -> list[Event]:
        """Run one scheduler iteration: the events reported since the last step (cancellations), then
        one decode call and one prefill call (see :mod:`~tlaloc.serving.runtime.scheduler`); returns
        the events of this step (see ``Event``)."""
        with self._lock:
            events = self._decoder("step").begin_step()
            if self._inflight is not None:
                applied, going = self._step_in_flight()
                events.extend(applied)
                if going:
                    return events                            # steady: nothing waits or prefills
            for mode in MODES:                               # decode first: a failure there may end prefills
                batch = self.scheduler.schedule(mode)
                if batch is not None:
                    defer = self.async_scheduling and not self._wait_next and self.scheduler.steady(batch)
                    events.extend(self._run_batch(batch, defer=defer))
            self._wait_next = False
            return events

    def cancel(self, request_id: str) -> bool:
        """Cancel a waiting or running request and free its pages; False if it is unknown or done."""
        with self._lock:
            return self._decoder("cancel").cancel(request_id)

    def fail(self, request_id: str, message: str) -> bool:
        """End a request with an error (counted in ``requests_failed``); False if it is unknown or done."""
        with self._lock:
            return self._decoder("fail").fail(request_id, message)

    @property
    def max_sequence_tokens(self) -> int:
        """The most tokens (prompt + new) one request can hold: the largest context, or fewer when
        the KV pool has fewer pages: a request needs ``ceil((tokens - 1) / block_size)`` pages, and
        ``num_pages - 1`` of them hold tokens (page 0 is the scratch page padding rows point at)."""
        if self.scheduler is None:
            return self.max_context
        return min(self.max_context, self.scheduler.pages.total * self.block_size + 1)

    def has_work(self) -> bool:
        with self._lock:
            return self.scheduler is not None and (self.scheduler.has_work() or self._inflight is not None)

    def stats(self) -> dict:
        """running, waiting, kv_pages_used, kv_pages_total, kv_pages_cached, tokens_in, tokens_out, ...;
        ``programs_compiled`` (in this process) and ``programs_used`` (distinct buckets this engine ran)."""
        with self._lock:
            if self.scheduler is None:
                return {"running": 0, "waiting": 0, "kv_pages_used": 0, "kv_pages_total": 0, "kv_pages_cached": 0,
                        "tokens_in": 0, "tokens_out": 0}
            return {**self.scheduler.stats(), "programs_compiled": compiled_count(),
                    "programs_used": len(self.programs_used)}

    # -- offline API -----------------------------------------------------------------------------
    def encode(self, text: str) -> list:
        if self.tokenizer is None:
            raise ArgumentError(f"{self.path} has no tokenizer; pass token ids instead of text")
        return list(self.tokenizer.encode(text).ids)

    def decode(self, ids) -> str:
        """The text of token ids (each an int in ``0..vocab_size-1``; ArgumentError, ``param`` ids, otherwise)."""
        ids = rq.check_token_ids(ids, self.vocab_size, "ids", param="ids")
        return "" if self.tokenizer is None else self.tokenizer.decode(ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **kwargs) -> str:
        """Render ``messages`` ([{"role", "content"}, ...]) with the artifact's chat template."""
        if not self.chat_template:
            raise ArgumentError(f"{self.path} has no chat template")
        from .chat import render_chat
        return render_chat(self.chat_template, messages, add_generation_prompt, **{**self._special, **kwargs})

    def generate(self, prompts, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed=None, stop=None) -> list[GenerationResult]:
        """Generate for each prompt, batched by the scheduler; one result per prompt, in order.

        ``prompts``: a list of prompts, each a string or a list of token ids; a single string is
        one prompt (as vLLM's ``LLM.generate``), so ``generate("Hi")`` is ``generate(["Hi"])``.

        ``stop``: a string, or a list of strings and token ids. A stop string ends the text before
        it (OpenAI's ``stop``; a str is one stop string, empty strings are ignored as the server
        ignores them). A stop id ends generation and is kept in ``token_ids``. Token ids in
        ``stop`` replace the model's EOS ids; otherwise (None, a str, a list of only strings) the
        EOS ids stop as well, as they do in the server; ``stop=[]`` never stops early.

        Prompt ``i`` samples with the generator seeded ``(seed, i)`` (``seed`` None: 0; a tuple
        of ints: ``(*seed, i)``), as the eager reference (``tlaloc.serving.export.reference``) does.

        Drives ``step()`` itself, so it refuses (ArgumentError) while requests made with
        :meth:`submit` are waiting or running: it would take their events. Step those to the end
        (or cancel them) first; the final events of requests already ended (a cancellation's) are
        kept for the next ``step()``. Do not call it while another loop steps the same engine.
        """
        self._decoder("generate")
        stop_ids, stop_texts = self._stop_args(stop)
        if isinstance(prompts, str):
            prompts = [prompts]
        elif not isinstance(prompts, (list, tuple)):
            raise rq.arg_error("prompts", f"generate: prompts must be a string or a list of prompts (each a "
                                          f"string or a list of token ids), got a {type(prompts).__name__}")
        ids = [self.encode(p) if isinstance(p, str) else rq.check_prompt(p, self.vocab_size) for p in prompts]
        parts = rq.check_seed(seed)
        base = [0] if parts is None else (parts if isinstance(seed, (tuple, list)) else parts[:1])
        with self._lock:
            self._refuse_if_busy()
            return self._generate(ids, stop_ids, stop_texts, base, dict(
                max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p))

    def _refuse_if_busy(self) -> None:
        live = self.scheduler.live_ids()
        if live:
            raise ArgumentError(
                f"generate: the engine holds {len(live)} live request(s) made with submit() ({', '.join(live[:8])}"
                f"{', ...' if len(live) > 8 else ''}); generate drives step() itself and would take their events. "
                f"Call step() until has_work() is False (or cancel() them) before calling generate")

    def _stop_args(self, stop) -> tuple:
        """``generate``'s ``stop`` as (stop ids, non-empty stop strings); see :meth:`generate`."""
        if stop is None:
            return list(self.eos_token_ids), []
        if isinstance(stop, str):
            stop = [stop]
        elif not isinstance(stop, (list, tuple)):
            raise rq.arg_error("stop", f"stop must be None, a string, or a list of strings and token ids, got a "
                                       f"{type(stop).__name__}: {stop!r:.80}")
        ids, texts = [], []
        for index, s in enumerate(stop):
            if isinstance(s, str):
                if s:
                    texts.append(s)
            elif rq.is_int(s) and s >= 0:
                ids.append(int(s))
            else:
                raise rq.arg_error("stop", f"stop[{index}] is {s!r} ({type(s).__name__}); stop holds strings and "
                                           f"non-negative integer token ids only")
        if not ids and len(stop):                       # only strings: the EOS ids still stop, as in the server
            ids = list(self.eos_token_ids)
        return ids, texts

    def _generate(self, ids, stop_ids, stop_texts, seed, params) -> list[GenerationResult]:
        failed: list = []                                       # prompt indices, in the order their errors came
        outs = [_Collected(k, failed) for k in range(len(ids))]
        loop, todo = EngineLoop(self), list(range(len(ids)))
        others = self.scheduler.set_aside_events()             # other requests' final events: for step()'s caller
        try:
            while todo or loop.live:
                while todo:                                      # submit what the queue takes
                    k = todo[0]
                    try:
                        outs[k].request_id = loop.submit(ids[k], outs[k], seed=(*seed, k), stop_ids=stop_ids,
                                                         **params)
                    except QueueFullError:
                        break
                    todo.pop(0)
                loop.step()
                if failed:
                    raise RuntimeError(f"generate: prompt {failed[0]} failed: {outs[failed[0]].error}")
                for out in outs:
                    if out.fresh and out.reason is None and stop_texts and \
                            any(s in self.decode(out.tokens) for s in stop_texts):
                        loop.cancel(out.request_id)
                        out.reason = "stop"
                    out.fresh = False
        finally:
            loop.cancel_all()                                    # after a refusal or a failure: free the rest
            self._settle()                                       # a call its ended requests left in flight
            self.scheduler.put_back_events(others, drop=[out.request_id for out in outs])  # not its own cancels
        results = []
        for out in outs:
            text = self.decode(out.tokens)
            for s in stop_texts:
                if s in text:
                    text = text[:text.index(s)]
            results.append(GenerationResult(out.tokens, text, out.reason))
        return results

    def call_program(self, mode: str, B: int, C: int, inputs: dict) -> list:
        """Run program (mode, B, C) outside the scheduler (``embed``, ``score``) on ``inputs`` (its request
        slots by name), under the engine's lock; its outputs in manifest order."""
        with self._lock:
            return self.executor.call(mode, B, C, inputs)

    def score(self, prompt):
        """Log-probabilities of ``prompt`` (a string or token ids) under the model: a ScoreResult.

        ``result.logprobs`` is (n-1,) float32 in nats, ``logprobs[i] = log p(ids[i+1] | ids[:i+1])``;
        ``result.greedy_ids`` (n-1,) int32 the argmax at each position; ``result.prompt_logprobs``
        vLLM's layout. Needs an artifact exported with ``score=True`` (``tlaloc export --score``).
        Raises ArgumentError (no score programs, encoder, bad ids) or CapacityError (longer
        than the largest context; ``tlaloc.serving.perplexity`` scores long texts in windows).
        See :mod:`tlaloc.serving.runtime.scoring`.
        """
        from .scoring import score
        return score(self, prompt)

    def embed(self, texts) -> np.ndarray:
        """Sentence embeddings (n, D) float32 of strings or token-id lists (encoder artifacts)."""
        if self.kind != "encoder":
            raise ArgumentError(f"embed: {self.path} is a decoder artifact; use generate() or submit()")
        rows = [self.encode(t) if isinstance(t, str) else [int(i) for i in t] for t in texts]
        for k, row in enumerate(rows):
            if not row:
                raise ArgumentError(f"embed: text {k} is empty")
            if len(row) > self.max_context:
                raise CapacityError(f"embed: text {k} has {len(row)} tokens, over the artifact's largest context "
                                    f"{self.max_context}; shorten it or export with a larger --context")
            bad = [t for t in row if not 0 <= t < self.vocab_size]
            if bad:
                raise ArgumentError(f"embed: token id {bad[0]} is out of range 0..{self.vocab_size - 1}")
        batch, context = self.manifest["buckets"]["batch"], self.manifest["buckets"]["context"]
        out = []
        for start in range(0, len(rows), batch[-1]):
            group = rows[start:start + batch[-1]]
            B = next(b for b in batch if b >= len(group))
            C = next(c for c in context if c >= max(map(len, group)))
            ids, mask = np.zeros((B, C), np.int32), np.zeros((B, C), np.int32)
            for r, row in enumerate(group):
                ids[r, :len(row)], mask[r, :len(row)] = row, 1
            emb = self.call_program("embed", B, C, {"token_ids": ids, "attention_mask": mask})[0]   # (B, D)
            out.append(np.asarray(emb)[:len(group)])
        return np.concatenate(out, axis=0) if out else np.zeros((0, self.config["hidden_size"]), np.float32)


__all__ = ["Engine", "GenerationResult", "Event"]


@dataclasses.dataclass(eq=False)
class _Collected:
    """One prompt of ``Engine.generate``: a sink that keeps its tokens and how it ended."""
    index: int
    failed: list                         # shared: the index of every prompt whose request failed
    tokens: list = dataclasses.field(default_factory=list)
    request_id: str | None = None
    reason: str | None = None
    error: str | None = None
    fresh: bool = False                  # tokens arrived in this step

    def __call__(self, event: Event) -> None:
        self.tokens.extend(event.token_ids)
        self.fresh = bool(event.token_ids)
        if event.error:
            self.error = event.error
            self.failed.append(self.index)
        elif event.finished:
            self.reason = event.finish_reason
