"""``export(model_path, out_dir, ...)``: a Hugging Face folder or GGUF file -> a serving artifact.

    from tlaloc.serving.export import export
    export("SmolLM2.gguf", "smol-art", batch=(1, 2, 4, 8), context=(64, 256, 1024))

What ``tlaloc export MODEL OUT_DIR [--batch 1,2,4,8] [--context 64,256,1024]
[--block-size 16] [--dtype f32|bf16] [--weights int8] [--score] [--top-logprobs 20]`` runs. The artifact (see
:mod:`tlaloc.serving.manifest`) holds one StableHLO program per bucket, built by the
tracing front end from the model code with the paged primitives, the weights as
safetensors, the tokenizer, and a manifest with every file's sha256. The same model
and options give byte-identical artifacts. The directory appears atomically: it is
written beside ``out_dir`` and renamed into place.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import tempfile
import time

import numpy as np

from ...errors import ArgumentError
from .. import manifest as mf
from ..errors import ArtifactError
from ...models.quantized import BLOCK
from .weights_format import GROUPS, SIDE, flatten, fuse_projections, head_copy, stored_tensors

log = logging.getLogger("tlaloc.serving")
WEIGHTS_FILE = "weights.safetensors"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_CHUNK = 256
#: the default prefill token ladder below the chunk: powers of 4 from 16 (see :func:`prefill_token_ladder`)
_PREFILL_RUNG, _PREFILL_STEP = 16, 4
#: the ``weights`` values that quantize (the others store ``dtype``)
_STORED = ("int8", "q8_0", "q4_1", "int4", "q4_k")


@dataclasses.dataclass(frozen=True)
class ExportSummary:
    """What ``export`` wrote: the directory, how many programs, bytes of weights and in all, seconds
    taken, and ``notes``: what the user should know about the artifact (e.g. it has no tokenizer)."""
    path: str
    kind: str
    num_programs: int
    weight_bytes: int
    total_bytes: int
    seconds: float
    notes: tuple = ()


def _ladder(values, name: str) -> list[int]:
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    try:
        out = sorted({int(v) for v in values})
    except (TypeError, ValueError):
        raise ArgumentError(f"export: {name} must be a list of positive integers like 1,2,4,8; got {values!r}") from None
    if not out or out[0] < 1:
        raise ArgumentError(f"export: {name} must be a list of positive integers like 1,2,4,8; got {values!r}")
    return out


def prefill_token_ladder(chunk: int, tokens=None) -> list:
    """The prefill programs' tokens per row, ascending, ending at ``chunk``.

    A prompt of n tokens runs in the smallest rung >= n (a longer one in chunks of ``chunk``),
    so a short prompt does not pay for a full chunk of padding: a 6-token prompt in a
    256-token prefill program computed 43x the tokens it needed (SmolLM2-135M q4_1: 385 ms
    instead of ~25 ms; benchmarks/RESULTS.md). ``tokens``: the rungs to use (a list or
    "16,64"), each at most ``chunk``; default 16, 64, 256, ... below ``chunk``. Rungs
    above ``chunk`` are refused (ArgumentError); ``chunk`` itself is always added.
    """
    if tokens is None:
        rungs, t = [], _PREFILL_RUNG
        while t < chunk:
            rungs.append(t)
            t *= _PREFILL_STEP
    else:
        rungs = _ladder(tokens, "prefill_tokens")
        over = [t for t in rungs if t > chunk]
        if over:
            raise ArgumentError(f"export: prefill_tokens {over} exceed the prefill chunk ({chunk} tokens); use rungs "
                                f"up to {chunk} or a larger prefill_chunk")
    return sorted(set(rungs) | {chunk})


def _check_group(weights, group) -> int:
    """The int4 group (32 when None); ArgumentError for another value, or a group given with another format."""
    if group is None:
        return BLOCK
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or int(group) not in GROUPS:
        raise ArgumentError(f"export: group={group!r}; use 32 or 64 (input rows per scale and offset of "
                            f"weights='int4')")
    if weights != "int4" and int(group) != BLOCK:
        raise ArgumentError(f"export: group={group!r} applies to weights='int4' only (weights={weights!r} uses "
                            f"blocks of 32); pass weights='int4' or leave group out")
    return int(group)


def _check_options(cfg, batch, context, block_size, dtype, weights, prefill_chunk):
    from ...models import EncoderConfig
    if dtype not in ("f32", "bf16"):
        raise ArgumentError(f"export: dtype={dtype!r}; use 'f32' or 'bf16'")
    if weights not in (None, "f32", "bf16") + _STORED:
        raise ArgumentError(f"export: weights={weights!r}; use None (same as dtype), 'int8', 'q8_0', 'q4_1', "
                            f"'int4' or 'q4_k'")
    limit = cfg.max_position_embeddings
    if context[-1] > limit:
        raise ArgumentError(f"export: context {context[-1]} is longer than the model's max_position_embeddings="
                            f"{limit}; use a context ladder up to {limit}")
    if isinstance(cfg, EncoderConfig):
        return
    if block_size < 1:
        raise ArgumentError(f"export: block_size must be positive, got {block_size}")
    bad = [c for c in context if c % block_size]
    if bad:
        raise ArgumentError(f"export: every context must be a multiple of block_size={block_size}; "
                            f"{', '.join(map(str, bad))} is not")
    if prefill_chunk is not None and prefill_chunk < 1:
        raise ArgumentError(f"export: prefill_chunk must be positive, got {prefill_chunk}")


def _jsonable(x):
    if dataclasses.is_dataclass(x):
        return {f.name: _jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


#: the stored formats whose products take the CPU kernels by default (every one), and the
#: decode attention reading the pages in place. float32 too: SmolLM2-135M decodes 1.13x
#: (batch 1) and 1.29x (batch 16) faster with the f32 kernel than with XLA's own dot
#: (benchmarks/decode_step.py --variants f32,f32-kernels, benchmarks/RESULTS.md).
#: the serving ops with CPU kernels of their own (besides the ``stored_matmul`` formats)
KERNEL_OPS = ("paged_attention", "kv_cache_write")
KERNEL_FORMATS = ("f32", "bf16", "i8ch", "q8_0", "q4_1", "f32_t", "bf16_t", "i8ch_t", "q8_0_t") + KERNEL_OPS


def _kernel_formats(cpu_kernels) -> tuple:
    from ..._prims.stored_matmul import FORMATS
    if cpu_kernels is True:
        return KERNEL_FORMATS
    if cpu_kernels is False or cpu_kernels is None:
        return ()
    bad = [f for f in cpu_kernels if f not in FORMATS and f not in KERNEL_OPS]
    if isinstance(cpu_kernels, str) or bad:
        raise ArgumentError(f"export: cpu_kernels must be True, False or a tuple of formats from {sorted(FORMATS)} "
                            f"and ops from {list(KERNEL_OPS)}, "
                            f"got {cpu_kernels!r}")
    return tuple(cpu_kernels)


def _program_entry(name, mode, B, C, T, inputs, outputs, donate, text) -> dict:
    return {"name": name, "mode": mode, "batch": B, "context": C, "tokens": T,
            "file": f"programs/{name}.mlir",
            "cache_key": mf.sha256_bytes(f"tlaloc-serving/{mf.SCHEMA_VERSION}\n".encode() + text.encode()),
            "inputs": [s.name for s in inputs],
            "request_slots": [s.to_json() for s in inputs if s.role not in ("kv_pool", "weight", "weight_scale")],
            "outputs": [s.to_json() for s in outputs],
            "donate": [[int(i), int(o)] for i, o in sorted(donate.items())]}


def _kernel_variant(entry: dict, texts: dict, lower_for_kernels, formats) -> None:
    """Add the CPU-kernel text of program ``entry`` (``entry["cpu_kernels"]``) when it differs.

    ``lower_for_kernels()`` traces the program again inside ``kernel_calls(formats)``; when no
    product took a kernel (nothing of those formats, or widths the kernels do not take), the
    texts are equal and no variant is written.
    """
    from ..._prims.stored_matmul import kernel_calls
    if not formats:
        return
    with kernel_calls(formats):
        program = lower_for_kernels()
    if program.text == texts[entry["name"]]:
        return
    name = entry["name"] + ".cpu"
    texts[name] = program.text
    targets = sorted(set(re.findall(r'custom_call @(tlaloc_cpu_\w+)', program.text)))
    entry["cpu_kernels"] = {"file": f"programs/{name}.mlir", "targets": targets,
                            "cache_key": mf.sha256_bytes(f"tlaloc-serving/{mf.SCHEMA_VERSION}\n".encode()
                                                         + program.text.encode()),
                            "panel64": _panel_weights(program.text, entry["inputs"], entry["name"])}


def _panel_weights(text: str, inputs: list, name: str) -> list:
    """The inputs of kernel text ``text`` that its ``_p64`` kernels read in panel order
    (``tlaloc._runtime.cpu_kernels.pack_panels``): every weight operand (all but the first) of
    such a call that is a program argument (a weight computed in the program is put in panel
    order there). Each must be used by those calls alone, since the executor uploads it
    packed; ArtifactError otherwise (a weight shared with another op)."""
    from ..._runtime.cpu_kernels import panel_target
    packed: dict = {}                          # argument number -> uses as a packed weight
    for target, operands in re.findall(r'stablehlo\.custom_call @(\w+)\(([^)]*)\)', text):
        if not panel_target(target):
            continue
        for operand in [o.strip() for o in operands.split(",")][1:]:
            m = re.fullmatch(r"%arg(\d+)", operand)
            if m is not None:
                packed[int(m.group(1))] = packed.get(int(m.group(1)), 0) + 1
    for arg, uses in packed.items():
        total = len(re.findall(rf"%arg{arg}(?![0-9])", text)) - 1        # less its declaration
        if total != uses:
            raise ArtifactError(f"export: program {name}: weight {inputs[arg]} feeds a panel-order CPU kernel and "
                                f"{total - uses} other op(s); it cannot be uploaded in one layout for both")
    return sorted(inputs[arg] for arg in packed)


def _token_buckets(mode: str, context: list, tokens: list) -> list:
    """(C, T) of every ``mode`` program per batch size: decode T = 1; prefill every rung of the
    token ladder ``tokens`` below C, then min(C, chunk) (chunk = ``tokens[-1]``)."""
    if mode == "decode":
        return [(C, 1) for C in context]
    return [(C, T) for C in context for T in sorted({t for t in tokens if t < C} | {min(C, tokens[-1])})]


def _decoder_programs(cfg, stored, batch, context, block_size, tokens, num_pages, kv_dtype, bar, top_logprobs=0,
                      kernel_formats=()):
    from .programs import Slot, decoder_step, kv_slots, logprob_slots, lower, request_slots, stacked_kv, weight_slots
    kv = kv_slots(cfg, num_pages, block_size, kv_dtype)
    ws = weight_slots(stored)
    step = decoder_step(cfg, [s.name for s in ws], cfg.num_layers, top_logprobs, stacked=stacked_kv(kv_dtype))
    programs, texts = [], {}
    for mode in ("prefill", "decode"):
        for B in batch:
            for C, T in _token_buckets(mode, context, tokens):
                name = f"{mode}_b{B}_c{C}" + (f"_t{T}" if mode == "prefill" and T < min(C, tokens[-1]) else "")
                request = request_slots(B, T, C // block_size, top_logprobs)
                inputs = request + kv + ws
                outputs = ([Slot("next_token_ids", "next_token_ids", np.dtype(np.int32), (B,))] + kv
                           + logprob_slots(B, top_logprobs))
                t0 = time.perf_counter()
                n_req = len(request)
                program = lower(step, inputs, name, donate=range(n_req, n_req + len(kv)))
                log.info("export: %s traced and emitted in %.2f s", name, time.perf_counter() - t0)
                if sorted(program.aliases.items()) != [(n_req + k, 1 + k) for k in range(len(kv))]:
                    raise AssertionError(f"{name}: KV pools not aliased one to one: {program.aliases}")
                entry = _program_entry(name, mode, B, C, T, inputs, outputs, program.aliases, program.text)
                texts[name] = program.text
                _kernel_variant(entry, texts, lambda: lower(step, inputs, name, donate=range(n_req, n_req + len(kv))),
                                kernel_formats)
                programs.append(entry)
                bar.update(1)
    return programs, texts, kv


def _score_programs(cfg, stored, context, kv_dtype, bar, kernel_formats=()):
    """One score program per context, batch 1 (see :func:`tlaloc.serving.export.programs.decoder_score`),
    with its CPU-kernel variant (so that the executor holds the packed weights only, not both layouts)."""
    from .programs import decoder_score, lower, score_slots, weight_slots
    ws = weight_slots(stored)
    fn = decoder_score(cfg, [s.name for s in ws], kv_dtype)
    programs, texts = [], {}
    for C in context:
        name = f"score_b1_c{C}"
        request, outputs = score_slots(C)
        program = lower(fn, request + ws, name)
        entry = _program_entry(name, "score", 1, C, C, request + ws, outputs, {}, program.text)
        texts[name] = program.text
        _kernel_variant(entry, texts, lambda: lower(fn, request + ws, name), kernel_formats)
        programs.append(entry)
        bar.update(1)
    return programs, texts


def _encoder_programs(cfg, stored, batch, context, bar):
    from .programs import Slot, encoder_embed, lower, weight_slots
    ws = weight_slots(stored)
    fn = encoder_embed(cfg, [s.name for s in ws])
    programs, texts = [], {}
    for B in batch:
        for C in context:
            name = f"embed_b{B}_c{C}"
            inputs = [Slot("token_ids", "token_ids", np.dtype(np.int32), (B, C)),
                      Slot("attention_mask", "attention_mask", np.dtype(np.int32), (B, C))] + ws
            outputs = [Slot("embeddings", "embeddings", np.dtype(np.float32), (B, cfg.hidden_size))]
            program = lower(fn, inputs, name)
            programs.append(_program_entry(name, "embed", B, C, C, inputs, outputs, {}, program.text))
            texts[name] = program.text
            bar.update(1)
    return programs, texts


def _check_tokenizer_fits(model, model_path: str) -> None:
    """CheckpointError when the tokenizer can produce ids the model has no embedding row for.

    A tokenizer smaller than the model is common (padded vocabularies); a larger one
    would hand the artifact ids past the end of its embedding table.
    """
    from ...models import CheckpointError
    if model.tokenizer is None:
        return
    ids = model.tokenizer.backend.get_vocab(with_added_tokens=True).values()
    size = max(ids, default=-1) + 1
    if size > model.config.vocab_size:
        raise CheckpointError(f"export: the tokenizer of {model_path} has {size} token ids but the model's "
                              f"vocabulary holds {model.config.vocab_size} (vocab_size, the embedding rows); "
                              "ids past the end would have no embedding: use the tokenizer that came with "
                              "the model")


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _safetensors_bytes(tensors: dict) -> bytes:
    from safetensors import TensorSpec, serialize
    alive = {name: np.ascontiguousarray(a) for name, a in tensors.items()}   # the pointers below stay valid
    specs = {name: TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, a in alive.items()}
    # one metadata key only: safetensors keeps metadata in a hash map, so several keys come out in any order
    return bytes(serialize(specs, metadata={"format": "np"}))


def _model_name(model_path: str) -> str:
    base = os.path.basename(os.path.normpath(model_path))
    return base[:-5] if base.endswith(".gguf") else base


def export(model_path, out_dir, *, batch=(1, 2, 4, 8), context=(64, 256, 1024), block_size: int = 16,
           dtype: str = "f32", weights: str | None = None, group: int | None = None, prefill_chunk: int | None = None,
           prefill_tokens=None, num_pages: int | None = None, name: str | None = None, overwrite: bool = False,
           progress: bool | None = None, score: bool = False, fuse: bool = True,
           top_logprobs: int = 20, cpu_kernels: bool | tuple = True) -> ExportSummary:
    """Export a model to a serving artifact directory.

    Args:
      model_path: a Hugging Face folder (config.json + safetensors [+ tokenizer.json]) or a .gguf file.
      out_dir: the artifact directory to create (refused if it exists, unless ``overwrite``).
        ``overwrite`` replaces only an earlier artifact or an empty directory, never the model
        itself or a directory holding it; out_dir is checked before any work is done.
      batch: the batch-size ladder (list or "1,2,4,8").
      context: the context-length ladder; each a multiple of ``block_size`` (decoders).
      block_size: token slots per KV page.
      dtype: "f32" or "bf16": how weights and KV pools are stored (programs compute in f32).
      weights: None (as ``dtype``), "int8" (per-output-channel scales) or "q8_0" (GGUF's
        Q8_0 blocks of 32 with float16 scales) or "q4_1" (GGUF's Q4_1) or "int4" (4-bit with a
        float16 scale and minimum per ``group`` input rows) or "q4_k" (a GGUF's Q4_K blocks kept
        exactly, float32 sub-block scales and offsets, and its Q6_K and Q8_0 layer matrices
        exactly too; a .gguf ``model_path`` holding Q4_K tensors only); see ``weights_format``.
      group: input rows per scale of weights="int4": 32 (default; the q4_1 layout) or 64.
        Recorded as the manifest's ``weights.group``.
      prefill_chunk: tokens per prefill step, at most (default min(256, max context)).
      prefill_tokens: the ladder of prefill program sizes in tokens per row (list or
        "16,64"), each at most the chunk; a prompt runs in the smallest that holds it
        (see :func:`prefill_token_ladder`; default 16, 64, ... below the chunk). Each rung
        adds one prefill program per batch size and context above it.
      num_pages: KV pages per layer, the scratch page included (default 1 + max batch *
        max context / block_size: every row at full context at once).
      name: the model name the artifact reports (default: the file or folder name).
      progress: show a progress bar (default: when stderr is a terminal).
      score: also write one ``score_b1_c<C>`` program per context (decoders): per-token
        log-probabilities of a given text, for ``Engine.score`` and ``tlaloc.serving.perplexity``.
        Off by default: each computes full-vocabulary logits for every position.
      fuse: store each decoder layer's q/k/v and gate/up matrices concatenated, one dot each
        (``weights_format.fuse_projections``; the manifest's ``weights.fused`` maps them back).
      top_logprobs: K, the most top log-probabilities a request may ask for (OpenAI's
        ``logprobs`` / ``top_logprobs``; at most the vocabulary size): the decoder programs
        also output the chosen token's log-probability and the K largest, from the
        full-vocabulary log-softmax in float32 (recorded as ``manifest["logprobs"]``).
        0 leaves them out (the server then refuses ``logprobs`` requests).
      cpu_kernels: also write, for each decoder program whose products by stored weights the
        CPU kernels take (``tlaloc._runtime.cpu_kernels``), a second text calling them
        (``programs/<name>.cpu.mlir``, ``program["cpu_kernels"]`` in the manifest); the
        runtime runs it on the CPU platform when the kernels load, the portable text
        elsewhere. True: every stored format and serving op (:data:`KERNEL_FORMATS`); a
        tuple of ``stored_matmul`` formats and ops (:data:`KERNEL_OPS`) to choose; False: none.

    Returns:
      An ExportSummary. Raises ArgumentError for a bad option, naming it.
    """
    from tqdm import tqdm

    from ...models import EncoderConfig, load
    t_start = time.perf_counter()
    model_path, out_dir = os.fspath(model_path), os.fspath(out_dir)
    _check_out_dir(model_path, out_dir, overwrite)
    batch, context = _ladder(batch, "batch"), _ladder(context, "context")
    model = load(model_path)
    cfg = model.config
    _check_tokenizer_fits(model, model_path)
    _check_options(cfg, batch, context, block_size, dtype, weights, prefill_chunk)
    group = _check_group(weights, group)
    if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, (int, np.integer)) or top_logprobs < 0:
        raise ArgumentError(f"export: top_logprobs must be a non-negative integer (0: no log-probabilities), "
                            f"got {top_logprobs!r}")
    top_logprobs = 0 if isinstance(cfg, EncoderConfig) else min(int(top_logprobs), int(cfg.vocab_size))
    fmt = weights if weights in _STORED else dtype
    is_encoder = isinstance(cfg, EncoderConfig)
    flat, fused = flatten(model.weights), {}
    exact = _q4_k_blocks(model_path, cfg, flat) if fmt == "q4_k" else None
    if fuse and not is_encoder:
        from .gguf_blocks import unfused_groups                  # q4_k: parts of different types stay apart
        keep = unfused_groups(exact, flat) if exact else ()
        flat, fused = fuse_projections(flat, keep)               # one dot for q/k/v, one for gate/up
    if exact:
        from .gguf_blocks import fuse_exact
        exact = fuse_exact(exact, fused)
    stored = stored_tensors(flat, fmt, group, exact)
    if not is_encoder and getattr(cfg, "tie_word_embeddings", False):
        stored = head_copy(stored, _kernel_formats(cpu_kernels))   # the head in the layers' faster kernel
    kv_dtype = np.dtype(np.float32) if dtype == "f32" else np.dtype("bfloat16")
    if score and is_encoder:
        raise ArgumentError("export: score=True writes next-token log-probability programs, which need a decoder; "
                            f"{model_path} is an encoder")
    chunk = min(prefill_chunk or DEFAULT_CHUNK, context[-1])
    tokens = prefill_token_ladder(chunk, prefill_tokens)
    pages = num_pages or 1 + batch[-1] * context[-1] // block_size
    count = (len(batch) * len(context) if is_encoder else
             len(batch) * sum(len(_token_buckets(m, context, tokens)) for m in ("prefill", "decode")))
    count += len(context) if score and not is_encoder else 0
    with tqdm(total=count, desc=f"export {_model_name(model_path)}", unit="program",
              disable=None if progress is None else not progress) as bar:
        if is_encoder:
            programs, texts = _encoder_programs(cfg, stored, batch, context, bar)
            kv = None
        else:
            if pages < 2:
                raise ArgumentError(f"export: num_pages={pages}; at least 2 (page 0 is scratch)")
            from .programs import kv_layout
            programs, texts, kv_list = _decoder_programs(cfg, stored, batch, context, block_size, tokens, pages,
                                                         kv_dtype, bar, top_logprobs,
                                                         _kernel_formats(cpu_kernels))
            if score:
                more, more_texts = _score_programs(cfg, stored, context, kv_dtype, bar, _kernel_formats(cpu_kernels))
                programs, texts = programs + more, {**texts, **more_texts}
            kv = {"block_size": block_size, "num_pages": pages, "scratch_page": 0, "dtype": kv_dtype.name,
                  "layout": kv_layout(kv_dtype),
                  "slots": [s.to_json() for s in kv_list]}
    files: dict[str, bytes] = {f"programs/{n}.mlir": t.encode("utf-8") for n, t in texts.items()}
    files[WEIGHTS_FILE] = _safetensors_bytes(stored)
    tok = None
    if model.tokenizer is not None:
        files[TOKENIZER_FILE] = model.tokenizer.backend.to_str().encode("utf-8")
        tok = {"file": TOKENIZER_FILE, "chat_template": model.tokenizer.chat_template,
               "bos_token": model.tokenizer.bos_token, "eos_token": model.tokenizer.eos_token}
    import jaxlib
    from ... import __version__
    manifest = {
        "schema": mf.SCHEMA, "schema_version": mf.SCHEMA_VERSION,
        "kind": "encoder" if is_encoder else "decoder",
        "model": {"name": name or _model_name(model_path), "architecture": cfg.architecture,
                  "model_type": cfg.model_type, "config": _jsonable(cfg)},
        "buckets": {"batch": batch, "context": context, "prefill_chunk": None if is_encoder else chunk,
                    "prefill_tokens": None if is_encoder else tokens},
        "kv": kv,
        "logprobs": {"top": top_logprobs, "dtype": "float32"} if top_logprobs else None,
        "weights": {"file": WEIGHTS_FILE, "format": fmt, "group": group if fmt in ("q4_1", "int4", "q4_k") else None,
                    "fused": fused,
                    "slots": [{"name": n, "role": "weight_scale" if n.endswith(SIDE) else "weight",
                               "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in stored.items()]},
        "programs": programs,
        "tokenizer": tok,
        "producer": {"tlaloc": __version__, "jaxlib": jaxlib.__version__},
        "files": {rel: {"sha256": mf.sha256_bytes(data), "bytes": len(data)} for rel, data in sorted(files.items())},
    }
    _write_atomically(out_dir, files, mf.dumps(manifest), overwrite)
    total = sum(len(d) for d in files.values())
    notes = () if model.tokenizer is not None else (
        f"{model_path} has no tokenizer (a GGUF without tokenizer.ggml.tokens, or a folder without "
        "tokenizer.json), so the artifact takes token ids only: text prompts and chat are refused",)
    for note in notes:
        log.warning("export: %s", note)
    summary = ExportSummary(out_dir, manifest["kind"], len(programs), len(files[WEIGHTS_FILE]), total,
                            time.perf_counter() - t_start, notes)
    log.info("export: %s -> %s: %d programs, %.1f MB in %.1f s", model_path, out_dir, summary.num_programs,
             total / 1e6, summary.seconds)
    return summary


def _q4_k_blocks(model_path: str, cfg, flat: dict) -> dict:
    """weights='q4_k': the GGUF's Q4_K (and Q6_K, Q8_0) layer matrices as stored parts
    (``gguf_blocks.exact_parts``); ArgumentError for a model that is not a GGUF file or holds no
    Q4_K layer matrix."""
    from .gguf_blocks import exact_parts
    if not model_path.endswith(".gguf"):
        raise ArgumentError(f"export: weights='q4_k' keeps a GGUF file's Q4_K blocks; {model_path} is not a .gguf "
                            f"file. Use weights='int4' to quantize it to 4 bits")
    exact = exact_parts(model_path, cfg)
    if not any(len(parts) == 3 for parts in exact.values()):
        raise ArgumentError(f"export: weights='q4_k': {model_path} holds no Q4_K layer matrix; use "
                            f"weights='int4' or 'q4_1'")
    missing = sorted(set(exact) - set(flat))
    if missing:
        raise ArtifactError(f"export: GGUF tensors {missing[:5]} of {model_path} have no weight in the model")
    return exact


_OWNER = ".export-pid"                 # in a temp dir while its export runs: the exporting process


def _check_out_dir(model_path: str, out_dir: str, overwrite: bool) -> None:
    """Refuse, before any work, an ``out_dir`` the export could not write or must not replace.

    ``overwrite`` replaces only an earlier artifact (a directory with a manifest) or an empty
    directory, and never the model itself or a directory holding it. Raises ArgumentError
    naming ``out_dir``."""
    if not out_dir.strip():
        raise ArgumentError("export: out_dir is empty; give the artifact directory to create, e.g. ./smollm2-art")
    out, model = os.path.realpath(out_dir), os.path.realpath(model_path)
    if os.path.exists(out_dir):
        if not overwrite:
            raise ArgumentError(f"export: {out_dir} exists; choose a new directory or pass overwrite=True")
        if model == out or model.startswith(out.rstrip(os.sep) + os.sep):
            raise ArgumentError(f"export: out_dir {out_dir} is (or holds) the model {model_path}; overwrite "
                                f"would delete the model. Choose another directory for the artifact")
        if not os.path.isdir(out_dir):
            raise ArgumentError(f"export: out_dir {out_dir} is a file, not a directory; overwrite replaces "
                                f"only an earlier artifact. Choose another path, or remove the file yourself")
        if os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, mf.MANIFEST)):
            raise ArgumentError(f"export: out_dir {out_dir} is not a tlaloc artifact (it has files but no "
                                f"{mf.MANIFEST}); overwrite replaces only an earlier artifact or an empty "
                                f"directory. Choose a new directory, or empty this one yourself")
    parent = os.path.dirname(out) or "."
    existing = parent
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:                                       # a real probe: access() says yes to root on /proc or /sys
        os.rmdir(tempfile.mkdtemp(prefix=".tlaloc-probe-", dir=existing))
    except OSError as e:
        raise ArgumentError(f"export: cannot create out_dir {out_dir}: {existing} is not a writable "
                            f"directory ({e.strerror}). Choose a path where you can write") from None


def _write_atomically(out_dir: str, files: dict, manifest_bytes: bytes, overwrite: bool) -> None:
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    _remove_stale_temps(parent, os.path.basename(os.path.abspath(out_dir)))
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.tmp-", dir=parent)
    try:
        _write(os.path.join(tmp, _OWNER), str(os.getpid()).encode())
        os.chmod(tmp, 0o755)
        os.makedirs(os.path.join(tmp, "programs"))
        for rel, data in files.items():
            _write(os.path.join(tmp, rel), data)
        _write(os.path.join(tmp, mf.MANIFEST), manifest_bytes)      # last: a manifest means a complete artifact
        os.remove(os.path.join(tmp, _OWNER))
        if os.path.exists(out_dir):
            if not overwrite:
                raise ArgumentError(f"export: {out_dir} appeared while exporting; not replacing it")
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.old-", dir=parent)
            os.rmdir(old)
            os.rename(out_dir, old)
            os.rename(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _remove_stale_temps(parent: str, name: str) -> None:
    """Delete ``.NAME.tmp-*`` / ``.NAME.old-*`` dirs left by killed exports of the same target (their
    exporting process is gone; a temp dir of a live export is kept)."""
    for entry in os.listdir(parent):
        if not (entry.startswith(f".{name}.tmp-") or entry.startswith(f".{name}.old-")):
            continue
        path = os.path.join(parent, entry)
        try:
            with open(os.path.join(path, _OWNER)) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid and _alive(pid):
            continue
        log.info("export: removing %s, left by an export that did not finish", path)
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True                              # someone else's live process
    return True


__all__ = ["export", "ExportSummary"]
