"""PodSecurity admission on the namespaces the e2e stack really created, judged by e2e/checks.py.

The namespaces are found on the live API server by who wrote them (the field managers the stack's state
records), not from a list. For each: its PodSecurity labels are exactly ray_llm_eks/domain/security/pod_security.py's;
every pod in it, dry-run created again as it is (`?dryRun=All`: admission runs, nothing is stored), is admitted; and
where its level is not restricted, the same pods dry-run created into a copy of it enforcing the next level
are refused by PodSecurity for the reasons pod_security.py names and no other, the reasons its own warn label
reported pod by pod. A namespace enforcing privileged can refuse nothing: that copy is where it is shown what
the level lets through, and it is the admission check above failing on purpose. Where the enforce level is
stricter than privileged, a pod that breaks it is refused in the namespace itself.
"""

from __future__ import annotations

from collections.abc import Callable

from e2e.checks import (
    admission_problems,
    owned_namespaces,
    pod_copy,
    psa_labels,
    stricter_problems,
    warned_as_refused,
)
from e2e.observe import wait_for, wait_for_gone
from ray_llm_eks.adapters.kube_client import KubeClient, KubeError
from ray_llm_eks.domain.security import pod_security

FIELD_MANAGER = "__fieldManager"  # where pulumi-kubernetes keeps a resource's server-side apply field manager


def state_field_managers(deployment: dict) -> set[str]:
    """The server-side apply field managers of the stack's Kubernetes resources (their state)."""
    return {
        r[part][FIELD_MANAGER]
        for r in deployment.get("resources", [])
        for part in ("inputs", "outputs")
        if isinstance(r.get(part), dict) and r[part].get(FIELD_MANAGER)
    }


def dry_run_pods(api: KubeClient, ns: str, pods: list[dict]) -> dict[str, tuple[str, list[str]]]:
    """Each pod dry-run created into `ns`: `{pod name: (refusal message or "", the API server's warnings)}`."""
    results = {}
    for pod in pods:
        try:
            _, warnings = api.request_warned("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod_copy(pod))
            results[pod["metadata"]["name"]] = ("", warnings)
        except KubeError as e:
            results[pod["metadata"]["name"]] = (str(e), [])
    return results


def breaking_pod(level: str) -> dict:
    """A pod that `level` refuses: privileged for baseline; for restricted, one baseline admits (no settings)."""
    security = {"privileged": True} if level == "baseline" else {}
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10", "securityContext": security}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": f"breaks-{level}-"},
            "spec": {"containers": [container]}}  # fmt: skip


def stack_namespaces_admit(
    api: KubeClient, deployment: dict, serving_namespace: str, what: str, log: Callable[[str], None], checks
) -> None:
    """The checks above, after an up of `what`; `deployment` is the stack's exported state."""
    in_state = sorted(
        r["outputs"]["metadata"]["name"]
        for r in deployment.get("resources", [])
        if r.get("type") == "kubernetes:core/v1:Namespace" and r.get("outputs")
    )
    managers = state_field_managers(deployment)
    live = owned_namespaces(api.get("/api/v1/namespaces")["items"], managers)
    checks.expect(bool(live) and live == in_state,
                  f"{what}: the namespaces the stack's field managers wrote on the API server are its state's",
                  f"live {live}, state {in_state}, managers {sorted(managers)}")  # fmt: skip
    known = pod_security.namespaces(serving_namespace)
    for ns in live:
        labels = psa_labels(api.get(f"/api/v1/namespaces/{ns}")["metadata"].get("labels"))
        if not checks.expect(
            ns in known, f"{what}: namespace {ns} has a level in ray_llm_eks/domain/security/pod_security.py"
        ):
            continue
        level, needs = known[ns]
        wanted = pod_security.labels(level)
        checks.expect(labels == wanted, f"{what}: namespace {ns}'s PodSecurity labels are exactly "
                      f"ray_llm_eks/domain/security/pod_security.py's ({level})",
                       f"live {labels}, wanted {wanted}")  # fmt: skip
        pods = api.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        own = dry_run_pods(api, ns, pods)
        refused = admission_problems(own)
        checks.expect(bool(pods) and not refused, f"{what}: PodSecurity admits each of the {len(pods)} pods in {ns} "
                      "again (dry-run create of its live spec)", "; ".join(refused) or "no pods")  # fmt: skip
        for pod, (_, warnings) in sorted(own.items()):
            log(f"  {ns}/{pod}: admitted; warnings {warnings or 'none'}")
        if level != "privileged":
            refusal = dry_run_refusal(api, ns, breaking_pod(level))
            checks.expect(f'violates PodSecurity "{level}:' in refusal,
                          f"{what}: {ns} refuses a pod that breaks {level}", refusal)  # fmt: skip
        stricter = pod_security.next_level(level)
        if stricter is not None and pods:
            copy_at_next_level(api, ns, stricter, needs, pods, own, what, log, checks)


def dry_run_refusal(api, ns: str, pod: dict) -> str:
    """The API server's answer to a dry-run create of `pod` in `ns`: its refusal, or "admitted"."""
    try:
        api.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
    except KubeError as e:
        return str(e)
    return "admitted"


def copy_at_next_level(api, ns, stricter, needs, pods, own, what, log, checks) -> None:
    """`ns`'s pods dry-run created into a namespace labelled as pod_security.py would label one at `stricter`."""
    copy_ns = f"{ns}-at-{stricter}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": copy_ns, "labels": pod_security.labels(stricter)}})  # fmt: skip
    try:
        # The ServiceAccount admission plugin refuses a pod whose service account does not exist, before
        # PodSecurity runs: the copy gets the pods' service accounts, so their specs go over unchanged.
        for sa in sorted({p["spec"].get("serviceAccountName") or "default" for p in pods} - {"default"}):
            api.request("POST", f"/api/v1/namespaces/{copy_ns}/serviceaccounts",
                        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})  # fmt: skip
        wait_for(f"default ServiceAccount in {copy_ns}",
                 lambda: api.get_or_none(f"/api/v1/namespaces/{copy_ns}/serviceaccounts/default"), 60)  # fmt: skip
        there = dry_run_pods(api, copy_ns, pods)
        for pod, (refusal, _) in sorted(there.items()):
            log(f"  {copy_ns}/{pod}: {refusal or 'admitted'}")
        checks.expect(bool(admission_problems(there)), f"{what}: the admission check fails when {ns}'s pods go to a "
                      f"copy enforcing {stricter} (it can fail)")  # fmt: skip
        problems = stricter_problems(there, stricter, needs)
        because = sorted(needs) if needs is not None else "reasons not established"
        checks.expect(not problems, f"{what}: a copy of {ns} enforcing {stricter} refuses its pods by PodSecurity "
                      f"for {because} only", "; ".join(problems))  # fmt: skip
        unwarned = warned_as_refused(own, there, stricter)
        checks.expect(not unwarned, f"{what}: {ns}'s warn label ({stricter}) reported each pod for what enforcing "
                      f"{stricter} refuses", "; ".join(unwarned))  # fmt: skip
        refusal = dry_run_refusal(api, copy_ns, breaking_pod(stricter))
        checks.expect(f'violates PodSecurity "{stricter}:' in refusal,
                      f"{what}: the {stricter} copy of {ns} refuses a pod that breaks {stricter}", refusal)  # fmt: skip
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{copy_ns}")
        wait_for_gone(api, f"/api/v1/namespaces/{copy_ns}", 60)
