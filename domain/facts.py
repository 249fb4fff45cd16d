"""Facts the program and its policy pack share, each written once. Standard library only: the policy
pack imports this module in its own venv (policy/venv) and under the Pulumi CLI."""

from __future__ import annotations

PROJECT = "ray-llm-eks"  # the config namespace, the type tokens' package, the tag prefix

# What a Pulumi secret reads as anywhere outside Pulumi: stack files read offline, `make plan`'s
# rendered files and outputs, the domain's view of a secret key.
SECRET_MARKER = "[secret]"
