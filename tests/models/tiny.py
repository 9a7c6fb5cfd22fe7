"""Tiny seeded checkpoints written by transformers, and transformers' greedy ids as the oracle."""
import numpy as np

# name -> (model_type, config overrides). Hidden 64, 2 layers; initializer_range 0.2 spreads the
# logits so fp32 rounding cannot flip an argmax.
CASES = {
    "llama": ("llama", {}),
    "llama_linear_rope": ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0,
                                                         "factor": 2.0}}),
    "llama_llama3_rope": ("llama", {"rope_parameters": {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}),
    "qwen2": ("qwen2", {}),
    "qwen3_tied": ("qwen3", {"head_dim": 16, "tie_word_embeddings": True}),
    "qwen3_untied": ("qwen3", {"head_dim": 16, "tie_word_embeddings": False}),
    "mistral_window6": ("mistral", {"sliding_window": 6}),
}
# prompt lengths 1, 9 and 24: three buckets, two of them longer than the Mistral window
PROMPTS = [[7], [3, 17, 99, 5, 200, 7, 8, 9, 10],
           [int(x) for x in np.random.default_rng(1).integers(3, 250, 24)]]
NEW_TOKENS = 32


def hf_classes(model_type):
    import transformers
    return {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[model_type]


def make_tiny(model_type, overrides, folder, seed=0):
    """A seeded random decoder saved with save_pretrained into folder; returns the torch model."""
    import torch
    config_cls, model_cls = hf_classes(model_type)
    kwargs = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    kwargs.update(overrides)
    config = config_cls(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.save_pretrained(folder)
    return model


def hf_greedy(model, prompt, n=NEW_TOKENS):
    """transformers' greedy continuation (fp32, eager attention), EOS ignored so all n come back."""
    import torch
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    new = out[0, len(prompt):].tolist()
    assert len(new) == n
    return new
