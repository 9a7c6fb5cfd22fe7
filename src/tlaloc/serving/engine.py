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
under an import guard). Loading checks the manifest's schema and every file's
sha256, uploads the weights once and allocates the KV pools on the device; the pools
stay there and are donated to every program call (updated in place). Programs compile
on first use of their bucket (or all at once with ``precompile=True``), once per
process for identical programs.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
import time

import numpy as np

from . import manifest as mf
from .errors import ArgumentError, ArtifactError, CapacityError, QueueFullError
from .scheduler import Event, Scheduler

log = logging.getLogger("tlaloc.serving")

_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
_COMPILED: dict = {}                 # (cache_key, platform) -> Executable: one compile per program per process
_COMPILE_LOCK = threading.Lock()


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


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

    Raises ArtifactError for a missing, tampered or unknown-schema artifact.
    """

    def __init__(self, artifact_dir, *, platform: str = "cpu", prefill_chunk: int | None = None,
                 max_waiting: int = 1024, verify: bool = True, precompile: bool = False,
                 fast_compile: bool = False, cache_dir: str | None = None):
        from . import device
        self._device = device
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
        self._lock = threading.RLock()
        self._programs = {(p["mode"], p["batch"], p["context"]): p for p in m["programs"]}
        self.programs_used: set = set()     # (mode, batch, context) of every program this engine has run
        self._plans: dict = {}
        self._special = {"bos_token": "", "eos_token": ""}
        self.tokenizer, self.chat_template = self._load_tokenizer()
        self._weights = self._upload_weights()
        self._pools: dict = {}
        self.scheduler = None
        if self.kind == "decoder":
            kv = m["kv"]
            self.block_size, self.num_pages = int(kv["block_size"]), int(kv["num_pages"])
            self._new_pools()
            chunk = int(m["buckets"]["prefill_chunk"])
            if prefill_chunk is not None and not 1 <= int(prefill_chunk) <= chunk:
                raise ArgumentError(f"prefill_chunk={prefill_chunk}: this artifact's prefill programs take at most "
                                    f"{chunk} tokens per row; use 1..{chunk}")
            self.scheduler = Scheduler(
                batch=m["buckets"]["batch"], context=m["buckets"]["context"], block_size=self.block_size,
                program_tokens=lambda mode, C: self._programs[(mode, m["buckets"]["batch"][0], C)]["tokens"],
                num_pages=self.num_pages, prefill_chunk=int(prefill_chunk or chunk), vocab_size=self.vocab_size,
                runner=self._run, max_waiting=max_waiting, on_failure=self._after_failure,
                max_logprobs=self.max_logprobs)
        elif self.kind != "encoder":
            raise ArtifactError(f"{self.path}: kind={self.kind!r}; this runtime serves 'decoder' and 'encoder'")
        if precompile:
            for key in sorted(self._programs):
                self._executable(*key)
        log.info("engine: loaded %s (%s, %d programs) in %.2f s", self.path, self.kind, len(self._programs),
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

    def _upload_weights(self) -> dict:
        from safetensors import deserialize
        w = self.manifest["weights"]
        with open(mf.resolve(self.path, w["file"]), "rb") as f:
            data = f.read()
        if self.verify:
            mf.check_bytes(self.manifest, w["file"], data)                     # the bytes uploaded are the ones hashed
        found = {}
        for name, info in deserialize(data):
            if info["dtype"] not in _ST_DTYPES:
                raise ArtifactError(f"{w['file']}: tensor {name} has dtype {info['dtype']}, which this runtime "
                                    f"does not read")
            found[name] = np.frombuffer(info["data"], _np_dtype(_ST_DTYPES[info["dtype"]])).reshape(info["shape"])
        want = {s["name"]: s for s in w["slots"]}
        if set(found) != set(want):
            missing, extra = sorted(set(want) - set(found)), sorted(set(found) - set(want))
            raise ArtifactError(f"{w['file']} does not hold the manifest's weights: missing {missing[:10]}, "
                                f"unexpected {extra[:10]}; re-export the artifact")
        out = {}
        for name, slot in want.items():
            arr = found[name]
            if arr.dtype != _np_dtype(slot["dtype"]) or list(arr.shape) != list(slot["shape"]):
                raise ArtifactError(f"{w['file']}: weight {name} is {arr.dtype}{list(arr.shape)}, the manifest says "
                                    f"{slot['dtype']}{slot['shape']}; re-export the artifact")
            out[name] = self._device.device_put(arr, self.platform)          # once; every call reuses it
        return out

    def _new_pools(self) -> None:
        self._pools = {}
        for slot in self.manifest["kv"]["slots"]:
            zeros = np.zeros(slot["shape"], _np_dtype(slot["dtype"]))
            self._pools[slot["name"]] = self._device.device_put(zeros, self.platform)   # owned: donatable in place

    # -- programs --------------------------------------------------------------------------------
    def _executable(self, mode: str, B: int, C: int):
        program = self._programs[(mode, B, C)]
        key = (program["cache_key"], self.platform, self.fast_compile)
        exe = _COMPILED.get(key)
        if exe is None:
            with _COMPILE_LOCK:
                exe = _COMPILED.get(key)
                if exe is None:
                    exe = self._compile(program)
                    _COMPILED[key] = exe
        return program, exe

    def _compile(self, program: dict):
        rel = program["file"]
        with open(mf.resolve(self.path, rel), "rb") as f:
            text = f.read()
        mf.check_bytes(self.manifest, rel, text)                                 # the text compiled is the one hashed
        avals = []
        slots = {s["name"]: s for s in program["request_slots"]}
        slots.update({s["name"]: s for s in (self.manifest["kv"] or {}).get("slots", [])})
        slots.update({s["name"]: s for s in self.manifest["weights"]["slots"]})
        for name in program["inputs"]:
            avals.append((_np_dtype(slots[name]["dtype"]), tuple(slots[name]["shape"])))
        t0 = time.perf_counter()
        cache_path = None
        if self.cache_dir:
            import jaxlib
            opts = "O0" if self.fast_compile else "O2"
            if self.platform == "cpu" and not self._device.memory_scheduler_active():
                opts += "-concurrent"                   # the scheduler changes the executable
            tag = f"{program['cache_key']}-{self.platform}-{opts}-jaxlib{jaxlib.__version__}"
            cache_path = os.path.join(self.cache_dir, tag + ".xla")
        exe = self._device.Program(text.decode("utf-8"), self.platform, list(program["inputs"]), avals,
                                   fast_compile=self.fast_compile, cache_path=cache_path)
        log.info("engine: %s %s in %.2f s (first use of bucket %s batch %d context %d)",
                 "loaded compiled" if exe.from_cache else "compiled", program["name"], time.perf_counter() - t0,
                 program["mode"], program["batch"], program["context"])
        return exe

    def _args(self, program: dict, request: dict) -> list:
        plan = self._plans.get(program["name"])
        if plan is None:
            plan = self._plans[program["name"]] = [
                ("r" if n in request else "k" if n in self._pools else "w", n) for n in program["inputs"]]
        return [request[n] if k == "r" else self._pools[n] if k == "k" else self._weights[n] for k, n in plan]

    def _run(self, mode: str, B: int, C: int, request: dict) -> dict:
        """Run one program; the pools it returns replace the donated ones. Returns its other
        outputs by role (``next_token_ids``, and ``token_logprob``, ``top_logprobs``, ``top_ids``
        where the artifact has them) as host arrays."""
        program, exe = self._executable(mode, B, C)
        self.programs_used.add((mode, B, C))
        outs = exe(*self._args(program, request))
        results = {}
        for slot, out in zip(program["outputs"], outs):
            if slot["role"] == "kv_pool":
                self._pools[slot["name"]] = out
            else:
                results[slot["role"]] = np.asarray(out)
        return results

    def _after_failure(self) -> list:
        """After a failed call: if the pools were consumed, make new ones and fail every running request."""
        if any(p.is_deleted() for p in self._pools.values()):
            self._new_pools()
            return self.scheduler.fail_all("the KV cache was lost when a program failed; resubmit the request")
        return []

    def kv_pool_pointers(self) -> list:
        """The device buffer address of every KV pool (donation keeps them fixed across steps)."""
        return [p.unsafe_buffer_pointer() for p in self._pools.values()]

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
        :class:`~tlaloc.serving.scheduler.TokenLogprobs` per token (that many top entries);
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
        """Run one scheduler iteration; returns the events of this step (see ``Event``)."""
        with self._lock:
            return self._decoder("step").step()

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
        the KV pool has fewer pages (a request needs ``ceil((tokens - 1) / block_size)`` pages)."""
        if self.scheduler is None:
            return self.max_context
        return min(self.max_context, self.num_pages * self.block_size + 1)

    def has_work(self) -> bool:
        with self._lock:
            return self.scheduler is not None and self.scheduler.has_work()

    def stats(self) -> dict:
        """running, waiting, kv_pages_used, kv_pages_total, kv_pages_cached, tokens_in, tokens_out, ...;
        ``programs_compiled`` (in this process) and ``programs_used`` (distinct buckets this engine ran)."""
        with self._lock:
            if self.scheduler is None:
                return {"running": 0, "waiting": 0, "kv_pages_used": 0, "kv_pages_total": 0, "kv_pages_cached": 0,
                        "tokens_in": 0, "tokens_out": 0}
            return {**self.scheduler.stats(), "programs_compiled": len(_COMPILED),
                    "programs_used": len(self.programs_used)}

    # -- offline API -----------------------------------------------------------------------------
    def encode(self, text: str) -> list:
        if self.tokenizer is None:
            raise ArgumentError(f"{self.path} has no tokenizer; pass token ids instead of text")
        return list(self.tokenizer.encode(text).ids)

    def decode(self, ids) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode([int(i) for i in ids])

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **kwargs) -> str:
        """Render ``messages`` ([{"role", "content"}, ...]) with the artifact's chat template."""
        if not self.chat_template:
            raise ArgumentError(f"{self.path} has no chat template")
        from .chat import render_chat
        return render_chat(self.chat_template, messages, add_generation_prompt, **{**self._special, **kwargs})

    def generate(self, prompts, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, stop=None) -> list[GenerationResult]:
        """Generate for each prompt (a string or a list of token ids), batched by the scheduler.

        ``stop`` holds token ids and strings; None means the model's EOS ids, ``[]`` never
        stops early. A stop id is kept in ``token_ids``; a stop string ends the text before
        it. Prompt ``i`` samples with the generator seeded ``(seed, i)`` (``seed`` None: 0),
        as the eager reference (``tlaloc.serving.generate``) does. Drives ``step()`` itself:
        do not call it while another loop steps the same engine.
        """
        self._decoder("generate")
        stop = list(self.eos_token_ids) if stop is None else list(stop)
        stop_ids = [s for s in stop if isinstance(s, (int, np.integer)) and not isinstance(s, bool)]
        stop_texts = [s for s in stop if isinstance(s, str)]
        ids = [self.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
        tokens = [[] for _ in ids]
        reasons: list = [None] * len(ids)
        todo = collections.deque(range(len(ids)))
        live: dict = {}                                          # request id -> prompt index, until finished
        while todo or live:
            while todo:                                          # submit what the queue takes
                k = todo[0]
                try:
                    rid = self.submit(ids[k], max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                      top_p=top_p, seed=(0 if seed is None else int(seed), k), stop_ids=stop_ids)
                except QueueFullError:
                    break
                except Exception:
                    for rid in live:
                        self.cancel(rid)
                    raise
                live[rid] = k
                todo.popleft()
            for ev in self.step():
                k = live.get(ev.request_id)
                if k is None:
                    continue
                tokens[k].extend(ev.token_ids)
                if ev.error:
                    for rid in live:
                        self.cancel(rid)
                    raise RuntimeError(f"generate: prompt {k} failed: {ev.error}")
                if ev.finished:
                    reasons[k] = ev.finish_reason
                    del live[ev.request_id]
                elif stop_texts and any(s in self.decode(tokens[k]) for s in stop_texts):
                    self.cancel(ev.request_id)
                    reasons[k] = "stop"
                    del live[ev.request_id]
        results = []
        for k in range(len(ids)):
            text = self.decode(tokens[k])
            for s in stop_texts:
                if s in text:
                    text = text[:text.index(s)]
            results.append(GenerationResult(tokens[k], text, reasons[k]))
        return results

    def score(self, prompt):
        """Log-probabilities of ``prompt`` (a string or token ids) under the model: a ScoreResult.

        ``result.logprobs`` is (n-1,) float32 in nats, ``logprobs[i] = log p(ids[i+1] | ids[:i+1])``;
        ``result.greedy_ids`` (n-1,) int32 the argmax at each position; ``result.prompt_logprobs``
        vLLM's layout. Needs an artifact exported with ``score=True`` (``tlaloc export --score``).
        Raises ArgumentError (no score programs, encoder, bad ids) or CapacityError (longer
        than the largest context; ``tlaloc.serving.perplexity`` scores long texts in windows).
        See :mod:`tlaloc.serving.scoring`.
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
            program, exe = self._executable("embed", B, C)
            with self._lock:
                emb = exe(*self._args(program, {"token_ids": ids, "attention_mask": mask}))[0]
            out.append(np.asarray(emb)[:len(group)])
        return np.concatenate(out, axis=0) if out else np.zeros((0, self.config["hidden_size"]), np.float32)


__all__ = ["Engine", "GenerationResult", "Event"]
