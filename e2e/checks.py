"""How the e2e judges what it read back, as functions of plain values, so each judgement can be shown
to fail on a broken input (tests/harness/test_e2e_checks.py) without a cluster."""

from __future__ import annotations

import yaml

from domain.cluster_checks import parse_quantity
from domain.serve_config import llm_configs_by_role


def _same_quantity(sent, live) -> bool:
    try:
        return parse_quantity(sent) == parse_quantity(live)
    except (TypeError, ValueError):
        return False


def unkept_fields(sent, live, path: str = "spec") -> list[str]:
    """Fields we sent that the API server did not keep as sent: pruned by the CRD's structural schema,
    or holding another value. Fields the server added (defaults) are not ours to judge. A resource
    quantity may come back in its canonical form ("2000m" as "2"): the KubeRay operator writes the
    RayService back through Go's corev1 types when it adds its finalizer (rayservice_controller.go,
    r.Update), so under `resources` the amounts are compared, not their spelling."""
    if isinstance(sent, dict):
        if not isinstance(live, dict):
            return [path]
        return [m for k, v in sent.items() for m in unkept_fields(v, live.get(k), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(live, list) or len(live) != len(sent):
            return [path]
        return [m for i, (a, b) in enumerate(zip(sent, live, strict=True)) for m in unkept_fields(a, b, f"{path}[{i}]")]
    if live == sent and type(live) is type(sent):
        return []
    return [] if ".resources." in path and _same_quantity(sent, live) else [path]


def max_model_lens(serve_config_v2: str) -> dict[str, int | None]:
    """engine_kwargs.max_model_len of each LLM config in a serveConfigV2, by the role it runs."""
    configs = llm_configs_by_role(yaml.safe_load(serve_config_v2), "serveConfigV2")
    return {role: (c.get("engine_kwargs") or {}).get("max_model_len") for role, c in configs.items()}


def names_failed_resource(text: str, type_token: str, name: str) -> bool:
    """The Pulumi CLI's diagnostics name a failed resource by its type and name on one line, e.g.
    `kubernetes:ray.io/v1:RayService (llm-rayservice):`, before its error."""
    return f"{type_token} ({name}):" in text
