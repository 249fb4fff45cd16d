"""Selective PD's decision, free of Ray and vLLM so the project's tests run it as the decode replicas run it
(ray_llm_eks/serve_ingress/selective_pd.py): a prompt shorter than the threshold is prefilled by the decode replica
itself, without a KV transfer; any other takes the split path."""

from __future__ import annotations

from collections.abc import Mapping

# The decode LLM config's experimental_configs key that holds the threshold in tokens (rendered by
# ray_llm_eks/domain/serving/serve_config.py from the stack key selectivePd).
THRESHOLD_CONFIG = "local_prefill_below_tokens"
LOCAL, SPLIT = "local", "split"  # the values of the request counter's `path` tag


def threshold(experimental_configs: Mapping) -> int | None:
    """The threshold the stack rendered, None when selective PD is off; a value the stack would not render
    stops the replica at start rather than routing by a guess."""
    value = experimental_configs.get(THRESHOLD_CONFIG)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"experimental_configs.{THRESHOLD_CONFIG} = {value!r}: a whole number of tokens, 1 or more")
    return value


def path_for(prompt_tokens: int | None, below: int | None) -> str:
    """LOCAL for a prompt shorter than `below` tokens. SPLIT when selective PD is off, for a longer prompt,
    and when the count is unknown (vLLM's tokenizer refused the request: the split path answers with the
    engine's own error, as without selective PD)."""
    if below is None or prompt_tokens is None:
        return SPLIT
    return LOCAL if prompt_tokens < below else SPLIT


def given_token_count(prompt: object) -> int | None:
    """A completion prompt given as token ids (one list, or a batch of lists): their count, without
    tokenizing; None for text, which vLLM's tokenizer must count."""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt)
    ):
        return sum(len(p) for p in prompt)
    return None


def tokenize_fields(request_fields: Mapping[str, object], set_fields: set[str], tokenize_fields: set[str]) -> dict:
    """The fields of a chat or completion request that a vLLM tokenize request of the same kind takes,
    as far as the client set them (both kinds share their defaults: vLLM 0.26 TokenizeChatRequest and
    ChatCompletionRequest, TokenizeCompletionRequest and CompletionRequest), so the count is of the prompt
    vLLM renders for the request: chat template, tools, special tokens."""
    return {k: request_fields[k] for k in sorted(tokenize_fields & set_fields) if k in request_fields}
