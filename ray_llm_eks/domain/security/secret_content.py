"""What a secret's content must be, checked where the value is decrypted: inside an Output of the running
program (`pulumi up`; `make plan` on a value a test hands it in plain text). A stack file's `secure:` value
reads as SECRET_MARKER offline: its checks are deferred to deploy time, each in a line of the plan, instead
of refusing a stack every `make stack` produces (the marker is no key of 16 characters)."""

from __future__ import annotations

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.security.ray_auth import TOKEN_RULE
from ray_llm_eks.domain.serving.api_keys import KEY_RULE

# Hugging Face user access tokens, read and fine-grained alike, start so (huggingface.co/docs/hub/security-tokens).
HF_TOKEN_PREFIX = "hf_"
RULES = {
    "apiKeys": KEY_RULE,
    "hfToken": f"a Hugging Face access token ({HF_TOKEN_PREFIX}..., one word)",
    "rayAuthToken": TOKEN_RULE,
}


def hf_token(raw: str) -> str:
    """The token as the hf-token Secret holds it; a token that cannot be one fails `pulumi up` before any object
    exists (a space or a pasted line break would otherwise end in 401s from the hub on GPUs paid for). The line
    never shows the token."""
    if not raw.startswith(HF_TOKEN_PREFIX) or any(c.isspace() for c in raw):
        raise ConfigError(
            "hfToken",
            "[secret]",
            f"{RULES['hfToken']}: pulumi config set --secret hfToken <token from huggingface.co/settings/tokens>",
        )
    return raw


def deferred(sealed: frozenset[str], api_key_check: bool) -> list[str]:
    """The offline plan's line for each sealed secret whose content `pulumi up` checks."""
    checked = [key for key in RULES if key in sealed and (key != "apiKeys" or api_key_check)]
    return [
        f"deferred to deploy time: {key}: {RULES[key]} (a `secure:` value, which only `pulumi up` decrypts)"
        for key in checked
    ]
