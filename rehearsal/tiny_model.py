"""Tiny random stand-ins for the stack's model, made on this machine: same layer kinds, small sizes,
a tokenizer trained here and a chat template. No hub access.

Runs inside the rehearsal venv (torch, transformers, tokenizers). The stand-in for a family is chosen
in rehearsal.substitute (pure Python); this module only builds it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# ChatML as Qwen3 writes it, with the `enable_thinking` switch of Qwen3's own template: off puts an
# empty think block in the prompt, so the model answers directly (the served Qwen3.5 is run that way).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
# Qwen's special tokens; vLLM's qwen3 reasoning parser refuses a tokenizer without <think>/</think>.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
VOCAB_SIZE = 2048  # small, so the embedding stays tiny; byte-level BPE covers any input anyway

# Text to train the BPE on: any English will do, the weights are random.
CORPUS = """The quick brown fox jumps over the lazy dog. Prefill reads the whole prompt once and writes
the key/value cache; decode then produces one token at a time from that cache. A serving engine moves
the cache from the prefill engine to the decode engine over the network. What is the capital of
France? Paris is the capital of France. Say hello in one short sentence. Hello! How can I help you
today? One, two, three, four, five, six, seven, eight, nine, ten. Numbers 0123456789 and symbols
.,;:!?'"()[]{}<>/+-*=_#@%&$ appear in code and in prose alike."""


# The stand-in's own context (config.json max_position_embeddings) where no role asks for a longer one: what an
# engine without max_model_len runs at (ray_llm_eks/domain/serving/role_view.py effective_max_model_len).
STAND_IN_MAX_POSITIONS = 4096


def _tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return len(fast)


def _config(family: str, vocab: int, eos: int, pad: int, max_len: int):
    import transformers

    common = dict(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,  # vLLM's CPU attention refuses head_dim 16; 64 works
        max_position_embeddings=max(max_len, STAND_IN_MAX_POSITIONS),
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=False,
    )
    if family == "qwen3_next":
        # Qwen3.5's text layers: Gated DeltaNet, with full (gated) attention every 4th layer. Dense
        # MLPs as in Qwen3.5-9B, but for the last layer: vLLM 0.26's Qwen3NextForCausalLM refuses a
        # model without one MoE layer ("No Qwen3Next layer found in the model.layers.").
        layers = 4
        return transformers.Qwen3NextConfig(
            num_hidden_layers=layers,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=64,
            linear_value_head_dim=64,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
            mlp_only_layers=list(range(layers - 1)),
            **common,
        )
    if family == "qwen3":
        return transformers.Qwen3Config(num_hidden_layers=2, **common)
    if family == "llama":
        return transformers.LlamaConfig(num_hidden_layers=2, **common)
    raise ValueError(f"no stand-in for model family {family!r}")


def make(family: str, out: Path, max_len: int) -> Path:
    """Build the stand-in at `out` (skipped when a complete one is there already)."""
    import torch
    import transformers

    marker = out / "rehearsal-stand-in.json"
    if marker.exists() and json.loads(marker.read_text()).get("family") == family:
        return out
    out.mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer(out)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    config = _config(family, vocab, tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id, max_len)
    torch.manual_seed(0)  # the same weights every time: runs compare
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    # vLLM reads the stop token of chat from generation_config.json.
    transformers.GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id).save_pretrained(
        out
    )
    marker.write_text(json.dumps({"family": family, "architectures": config.architectures}))
    return out


if __name__ == "__main__":
    try:
        print(make(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
    except KeyboardInterrupt:  # Ctrl-C reaches this child too: rehearsal.run says it in one line
        sys.exit(130)
