"""How the e2e judges what it read back, as functions of plain values, so each judgement can be shown
to fail on a broken input (tests/harness/e2e/test_e2e_checks.py) without a cluster."""

from __future__ import annotations

import re

import yaml

from ray_llm_eks.domain.platform.cluster_checks import parse_quantity
from ray_llm_eks.domain.security import pod_security
from ray_llm_eks.domain.serving.serve_app import parse_document


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
    roles = parse_document(yaml.safe_load(serve_config_v2), "serveConfigV2").roles
    return {role: config.engine.max_model_len for role, config in roles.items()}


def names_failed_resource(text: str, type_token: str, name: str) -> bool:
    """The Pulumi CLI's diagnostics name a failed resource by its type and name on one line, e.g.
    `kubernetes:ray.io/v1:RayService (llm-rayservice):`, before its error."""
    return f"{type_token} ({name}):" in text


# -- PodSecurity admission -------------------------------------------------------------------------

_PSA_MESSAGE = re.compile(r'(?:violates|would violate) PodSecurity "([a-z]+):[^"]*": (.*)$', re.S)


def psa_labels(labels: dict | None) -> dict[str, str]:
    """The PodSecurity admission labels among a namespace's labels."""
    return {k: v for k, v in (labels or {}).items() if k.startswith(f"{pod_security.PREFIX}/")}


def owned_namespaces(namespaces: list[dict], managers: set[str]) -> list[str]:
    """Names of the live namespaces that one of `managers` wrote (server-side apply records each writer in
    metadata.managedFields; the stack's field managers are in its state), sorted."""
    return sorted(
        n["metadata"]["name"]
        for n in namespaces
        if any(f.get("manager") in managers for f in n["metadata"].get("managedFields") or [])
    )


def psa_verdict(message: str) -> tuple[str, set[str]] | None:
    """(level, check reasons) of a PodSecurity refusal or warning, e.g. `pods "x" is forbidden: violates
    PodSecurity "baseline:latest": hostPath volumes (volume "a"), privileged (container "b" must not set
    securityContext.privileged=true)` -> ("baseline", {"hostPath volumes", "privileged"}); None for any other
    message. Reasons are split at the commas outside the parenthesised details."""
    m = _PSA_MESSAGE.search(message)
    if not m:
        return None
    reasons, depth, part = set(), 0, ""
    for ch in m.group(2) + ",":
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            reasons.add(part.split(" (", 1)[0].strip())
            part = ""
        else:
            part += ch
    return m.group(1), reasons - {""}


def pod_copy(pod: dict) -> dict:
    """A live pod as a new pod to create: its spec, labels and annotations (PodSecurity reads the spec and the
    seccomp/AppArmor annotations), a generated name; nothing the server wrote (uid, owner, status)."""
    meta = pod["metadata"]
    copy_meta = {"generateName": f"{meta['name']}-"}
    for key in ("labels", "annotations"):
        if meta.get(key):
            copy_meta[key] = dict(meta[key])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": copy_meta, "spec": pod["spec"]}


def admission_problems(results: dict[str, tuple[str, list[str]]]) -> list[str]:
    """Pods whose dry-run create was refused: `results[pod] = (refusal message or "", warnings)`."""
    return [f"{pod}: {refusal}" for pod, (refusal, _) in sorted(results.items()) if refusal]


def stricter_problems(results: dict[str, tuple[str, list[str]]], level: str, needs: frozenset[str] | None) -> list[str]:
    """What is wrong with a namespace's pods dry-run created at `level`, the next stricter one: something
    must be refused there by PodSecurity at that level (else the namespace could be enforced stricter), and
    only for the check reasons `needs` names (None: any reason)."""
    refused = {pod: refusal for pod, (refusal, _) in results.items() if refusal}
    if not refused:
        return [f"every pod passes {level}: the namespace could enforce it"]
    problems = []
    for pod, refusal in sorted(refused.items()):
        verdict = psa_verdict(refusal)
        if verdict is None or verdict[0] != level:
            problems.append(f"{pod}: refused, not by PodSecurity at {level}: {refusal}")
        elif needs is not None and verdict[1] - needs:
            problems.append(f"{pod}: {sorted(verdict[1] - needs)} beyond what keeps it lower ({sorted(needs)})")
    return problems


def warned_as_refused(
    own: dict[str, tuple[str, list[str]]], stricter: dict[str, tuple[str, list[str]]], level: str
) -> list[str]:
    """Pods whose PodSecurity warning at `level` in their own namespace (its warn label) does not name the
    same reasons as their refusal by a namespace enforcing `level`: the warning must report what enforcing
    would refuse, pod by pod."""
    problems = []
    for pod in sorted(own):
        warned = [v for v in map(psa_verdict, own[pod][1]) if v and v[0] == level]
        refused = psa_verdict(stricter.get(pod, ("", []))[0])
        warned_reasons = warned[0][1] if warned else set()
        refused_reasons = refused[1] if refused and refused[0] == level else set()
        if warned_reasons != refused_reasons:
            problems.append(f"{pod}: warned {sorted(warned_reasons)}, refused {sorted(refused_reasons)}")
    return problems
