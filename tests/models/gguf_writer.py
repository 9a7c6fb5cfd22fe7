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


def write_llama_gguf(path, hf_model, qtype="Q8_0", extra_tensor=None):
    """Write a transformers LlamaForCausalLM as a llama-architecture GGUF (q/k permuted, 2-D weights quantized)."""
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
        if a.ndim == 2:
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
