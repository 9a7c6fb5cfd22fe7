"""Writing small GGUF files for tests: a seeded Llama as llama.cpp's converter would, and raw blocks."""
import numpy as np

ALPHABET_MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n"]


def byte_alphabet():
    """GPT-2's bytes -> printable characters table (the byte-level BPE alphabet)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def tiny_vocab():
    tokens = byte_alphabet() + [m.replace(" ", "") for m in ALPHABET_MERGES] + ["<|im_start|>", "<|im_end|>"]
    types = [1] * (len(tokens) - 2) + [3, 3]  # NORMAL, then two CONTROL tokens
    return tokens, types


def llamacpp_permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows for its rotary layout."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def pack_q4_k(a: np.ndarray) -> np.ndarray:
    """ggml Q4_K blocks of float rows ``a`` (rows, n), n a multiple of 256: uint8 (rows, n / 256 * 144).

    Written from ggml-common.h's ``block_q4_K`` (float16 d, dmin; 12 bytes of 6-bit scales and
    minimums as ``get_scale_min_k4`` reads them; 128 bytes of nibbles, bytes 32c..32c+31 holding
    sub-block 2c low and 2c+1 high) with a plain rule, not ggml's search: per sub-block of 32,
    minimum lo = min(0, min w) and step (max w - lo) / 15; d = max step / 63, dmin = max(-lo) / 63.
    """
    rows, n = a.shape
    sub = a.astype(np.float32).reshape(rows, n // 256, 8, 32)
    lo = np.minimum(sub.min(axis=-1), 0)                                    # (rows, nsb, 8)
    step = (sub.max(axis=-1) - lo) / 15
    d = (step.max(axis=-1) / 63).astype(np.float16)                         # (rows, nsb)
    dmin = ((-lo).max(axis=-1) / 63).astype(np.float16)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(np.rint(step / np.where(d32 > 0, d32, 1)[..., None]), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(-lo / np.where(dmin32 > 0, dmin32, 1)[..., None]), 0, 63).astype(np.uint8)
    s1 = d32[..., None] * sc.astype(np.float32)                               # (rows, nsb, 8)
    m1 = dmin32[..., None] * m.astype(np.float32)
    q = np.clip(np.rint((sub + m1[..., None]) / np.where(s1 > 0, s1, 1)[..., None]), 0, 15).astype(np.uint8)
    scales = np.empty((rows, n // 256, 12), np.uint8)
    scales[..., 0:4] = (sc[..., :4] & 63) | ((sc[..., 4:] >> 4) << 6)
    scales[..., 4:8] = (m[..., :4] & 63) | ((m[..., 4:] >> 4) << 6)
    scales[..., 8:12] = (sc[..., 4:] & 15) | ((m[..., 4:] & 15) << 4)
    qs = (q[..., 0::2, :] | (q[..., 1::2, :] << 4)).reshape(rows, n // 256, 128)   # (rows, nsb, 4 * 32)
    blocks = np.concatenate([d.view(np.uint8).reshape(rows, -1, 2), dmin.view(np.uint8).reshape(rows, -1, 2),
                             scales, qs], axis=-1)                            # (rows, nsb, 144)
    return np.ascontiguousarray(blocks.reshape(rows, -1))


def pack_q6_k(a: np.ndarray) -> np.ndarray:
    """ggml Q6_K blocks of float rows ``a`` (rows, n), n a multiple of 256: uint8 (rows, n / 256 * 210).

    Written from ggml-common.h's ``block_q6_K`` (``ql[128]``, ``qh[64]``, int8 ``scales[16]``,
    float16 ``d``, in that order) and ``dequantize_row_q6_K`` (in half h of 128 weights, for
    l < 32: weight 128 h + l is ``ql[64 h + l] & 15`` with bits 0-1 of ``qh[32 h + l]`` above,
    128 h + 32 + l ``ql[64 h + 32 + l] & 15`` with bits 2-3, 128 h + 64 + l ``ql[64 h + l] >> 4``
    with bits 4-5, 128 h + 96 + l ``ql[64 h + 32 + l] >> 4`` with bits 6-7; value
    ``d * scales[i / 16] * (q - 32)``), with a plain rule, not ggml's search: per 16 weights
    step = max|w| / 31, d = max step / 127, sc = round(step / d), q = clip(round(w / (d sc)), -32, 31) + 32.
    """
    rows, n = a.shape
    nsb = n // 256
    sub = a.astype(np.float32).reshape(rows, nsb, 16, 16)
    step = np.abs(sub).max(axis=-1) / 31                                     # (rows, nsb, 16)
    d = (step.max(axis=-1) / 127).astype(np.float16)                         # (rows, nsb)
    d32 = d.astype(np.float32)
    sc = np.clip(np.rint(step / np.where(d32 > 0, d32, 1)[..., None]), -128, 127).astype(np.int8)
    s1 = d32[..., None] * sc.astype(np.float32)
    q = np.clip(np.rint(sub / np.where(s1 != 0, s1, 1)[..., None]), -32, 31).astype(np.int16) + 32
    q = q.reshape(rows, nsb, 256).astype(np.uint8)                           # 0 .. 63
    ql = np.zeros((rows, nsb, 128), np.uint8)
    qh = np.zeros((rows, nsb, 64), np.uint8)
    for h in range(2):
        for l in range(32):
            q1, q2, q3, q4 = (q[..., 128 * h + 32 * k + l] for k in range(4))
            ql[..., 64 * h + l] = (q1 & 15) | ((q3 & 15) << 4)
            ql[..., 64 * h + 32 + l] = (q2 & 15) | ((q4 & 15) << 4)
            qh[..., 32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    blocks = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(rows, nsb, 2)], axis=-1)
    return np.ascontiguousarray(blocks.reshape(rows, -1))                    # (rows, nsb * 210)


def write_llama_gguf(path, hf_model, qtype="Q8_0", extra_tensor=None, layer_qtype=None, keep=(), keep_qtype=None):
    """Write a transformers LlamaForCausalLM as a llama-architecture GGUF (q/k permuted, 2-D weights quantized).

    ``layer_qtype="Q4_K"``: the layers' matrices as Q4_K (:func:`pack_q4_k`), the rest as ``qtype``;
    ``keep``: GGUF names (``attn_v``, ``ffn_down``) of layer matrices left in ``qtype``, as a
    Q4_K_M file keeps some of them in Q6_K; ``keep_qtype="Q6_K"``: those in Q6_K (:func:`pack_q6_k`)
    instead of ``qtype``."""
    import gguf
    cfg = hf_model.config
    tokens, types = tiny_vocab()
    assert len(tokens) == cfg.vocab_size
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(ALPHABET_MERGES)
    w.add_bos_token_id(len(tokens) - 2)
    w.add_eos_token_id(len(tokens) - 1)
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    names = {"embed_tokens": "token_embd", "norm": "output_norm", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, tensor in hf_model.state_dict().items():
        a = tensor.detach().numpy().astype(np.float32)
        base = name.removesuffix(".weight").removeprefix("model.")
        if base == "lm_head":
            out = "output"
        elif base.startswith("layers."):
            _, i, rest = base.split(".", 2)
            out = f"blk.{i}.{names[rest]}"
        else:
            out = names[base]
        if base.endswith("q_proj"):
            a = llamacpp_permute(a, cfg.num_attention_heads)
        elif base.endswith("k_proj"):
            a = llamacpp_permute(a, cfg.num_key_value_heads)
        if a.ndim == 2 and layer_qtype == "Q4_K" and out.startswith("blk.") and out.split(".")[2] not in keep:
            w.add_tensor(out + ".weight", pack_q4_k(a), raw_dtype=gguf.GGMLQuantizationType.Q4_K)
        elif a.ndim == 2 and keep_qtype == "Q6_K" and out.startswith("blk.") and out.split(".")[2] in keep:
            w.add_tensor(out + ".weight", pack_q6_k(a), raw_dtype=gguf.GGMLQuantizationType.Q6_K)
        elif a.ndim == 2:
            w.add_tensor(out + ".weight", gguf.quantize(a, qt), raw_dtype=qt)
        else:
            w.add_tensor(out + ".weight", a)
    if extra_tensor is not None:
        w.add_tensor(extra_tensor, np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
