"""`--random-weights`: the served model's real architecture with random weights, built here from its config.json
with transformers (no download), and a tokenizer built here with the model's vocabulary size and its special
tokens at their ids (random weights can sample any id, so every id must decode).

Runs in the rehearsal's Python (torch, transformers, tokenizers) as a child process:
    python rehearsal/gpu_model.py CONFIG_JSON OUT_DIR [cuda|cpu]
The layout of the memory, not the answers, is what the GPU rehearsal measures: the answers are noise.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from measure.hf_model_spec import text_config
from rehearsal.tiny_model import CHAT_TEMPLATE, CORPUS

# Qwen's special tokens in their id order, from <|endoftext|> (the config's eos/bos id) on; the reasoning and
# tool tags are not special (Qwen's tokenizer_config.json marks them so), the rest are.
QWEN_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]  # fmt: skip
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
MARKER = "rehearsal-random-weights.json"


def tokenizer_json(config: dict) -> str:
    """A byte-level BPE tokenizer whose ids fill exactly the model's vocabulary: BPE trained on a little English,
    filler tokens, then the family's special tokens from the end-of-text id on, reserved ones to the end."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = text_config(config)
    vocab_size, first_special = int(text["vocab_size"]), int(text["eos_token_id"])
    if "qwen" not in str(config.get("model_type", "")):
        raise SystemExit(
            f"--random-weights builds a tokenizer for Qwen-family models; model_type {config.get('model_type')!r}: "
            "give --weights DIR (a local copy) instead"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([CORPUS] * 50, trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    i = 0
    while len(vocab) < first_special:  # letters only: unique, decodable (" zz<letters>")
        word, k = "", i
        while True:
            word, k = chr(ord("a") + k % 26) + word, k // 26
            if k == 0:
                break
        vocab.setdefault("\u0120zz" + word, len(vocab))
        i += 1
    names = QWEN_SPECIALS + [
        f"<|reserved_special_token_{k}|>" for k in range(vocab_size - first_special - len(QWEN_SPECIALS))
    ]
    spec["added_tokens"] = [
        {"id": first_special + k, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": name not in NOT_SPECIAL}
        for k, name in enumerate(names)
    ]  # fmt: skip
    built = Tokenizer.from_str(json.dumps(spec))
    assert built.get_vocab_size(with_added_tokens=True) == vocab_size
    return built.to_str()


def build(config_path: Path, out: Path, device: str = "cuda") -> Path:
    """Random bf16 weights of the config's architecture, saved as a Hugging Face model directory."""
    import torch
    import transformers

    config = json.loads(config_path.read_text())
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("config") == config:
        print(f"random weights already built in {out}", flush=True)
        return out
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(tokenizer_json(config))
    arch = config["architectures"][0]
    # A deep copy: transformers (5.24 in the rehearsal venv) rewrites the nested vision_config's model_type in
    # place, and the marker and config.json must hold the config as given (else every run rebuilds: 40 s, 9B).
    fields = copy.deepcopy({k: v for k, v in config.items() if k not in {"architectures", "model_type"}})
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    hf_config.architectures = [arch]
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = getattr(transformers, arch)(hf_config)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16).eval()
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        part = "vision" if ".visual." in f".{name}" else "mtp" if ".mtp." in f".{name}" else "text"
        counts[part] = counts.get(part, 0) + p.numel()
    print(f"parameters built: {', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))}", flush=True)
    model.save_pretrained(out, max_shard_size="4GB")
    del model
    # config.json exactly as given (vLLM reads text_config's fields, e.g. mamba_ssm_dtype, from it).
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    text = text_config(config)
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(out / "tokenizer.json"),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=int(text.get("max_position_embeddings", 32768)),
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)
    if arch.endswith("ForConditionalGeneration"):
        _processor_files(transformers, tok, out)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    transformers.GenerationConfig(eos_token_id=[im_end, int(text["eos_token_id"])],
                                  pad_token_id=int(text["eos_token_id"])).save_pretrained(out)  # fmt: skip
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**30
    marker.write_text(json.dumps({"config": config, "parameters": counts}))
    print(f"random weights of {arch} in {out}: {size:.2f} GiB, {time.monotonic() - t0:.0f} s", flush=True)
    return out


def _processor_files(transformers, tok, out: Path) -> None:
    """A multimodal model's processor files (Qwen3-VL's, which Qwen3.5 uses): vLLM builds the model's
    processor even when it serves the language model only."""
    try:
        processor = transformers.Qwen3VLProcessor(
            image_processor=transformers.Qwen2VLImageProcessor(patch_size=16, merge_size=2),
            tokenizer=tok,
            video_processor=transformers.Qwen3VLVideoProcessor(patch_size=16, merge_size=2),
            chat_template=CHAT_TEMPLATE,
        )
        processor.save_pretrained(out)
    except (AttributeError, TypeError, ValueError) as exc:  # a text-only server may not need them
        print(f"processor files not saved: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    try:
        build(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "cuda")
    except KeyboardInterrupt:
        sys.exit(130)
