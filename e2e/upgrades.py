"""Upgrades and an interrupted `pulumi up` on the control-plane rehearsal (real API server, scheduler and KubeRay
operator; no kubelet, so Ray never turns Ready).

- `new_cluster_beside_old`: a RayService under `upgradeStrategy: NewCluster`, applied straight to the API. The
  first RayCluster never serves here, so the harness writes the status a served cluster has
  (`activeServiceStatus.rayClusterName`: EMULATED promotion, as the operator writes it once the cluster
  serves); then a cluster change makes the operator start a second RayCluster and keep the first one, the
  active one, while the new one is pending.
- `interrupted_up`: `pulumi up` killed (SIGKILL of the CLI and its plugins, as a CI runner's cancel does) while
  it creates the RayService, then the recovery docs/operations.md names, then the stack must hold the same
  objects as an uninterrupted up, nothing orphaned or doubled, and a refresh finds no drift."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from e2e.observe import object_path, wait_for, wait_for_gone
from ray_llm_eks.adapters.kube_client import KubeClient

UPGRADE_NS = "e2e-upgrade"
RAY_CLUSTERS = "/apis/ray.io/v1/namespaces/{ns}/rayclusters"


def _clusters(api: KubeClient, ns: str, owner: str) -> list[str]:
    items = api.get(RAY_CLUSTERS.format(ns=ns))["items"]
    return sorted(
        c["metadata"]["name"]
        for c in items
        if any(o.get("name") == owner for o in c["metadata"].get("ownerReferences", []))
        and not c["metadata"].get("deletionTimestamp")
    )


def gcs_ft_admitted(api: KubeClient, specs: dict[str, dict], checks) -> None:
    """Server-side dry runs of RayServices with GCS fault tolerance (the prod stack's redis options, and rocksdb):
    the API server (with KubeRay v1.7.0's RayService CRD) keeps every field as sent."""
    from e2e.checks import unkept_fields

    for what, spec in specs.items():
        body = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": what, "namespace": UPGRADE_NS},
                "spec": spec}  # fmt: skip
        live = api.request("POST", f"/apis/ray.io/v1/namespaces/{UPGRADE_NS}/rayservices?dryRun=All", body)
        options = live["spec"]["rayClusterConfig"].get("gcsFaultToleranceOptions")
        checks.expect(
            not unkept_fields(spec, live["spec"]) and options == spec["rayClusterConfig"]["gcsFaultToleranceOptions"],
            f"GCS fault tolerance ({what}): the API server keeps gcsFaultToleranceOptions as sent (dry run)",
            str(unkept_fields(spec, live["spec"])[:5]),
        )


def new_cluster_beside_old(
    api: KubeClient, spec: dict, log: Callable[[str], None], checks, ft_specs: dict[str, dict] | None = None
) -> None:
    """`spec`: our one builder's RayService spec; applied here with upgradeStrategy NewCluster. `ft_specs`: specs
    with GCS fault tolerance to dry-run first."""
    name = "upgrade"
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": UPGRADE_NS}}
    )
    wait_for(
        f"default ServiceAccount in {UPGRADE_NS}",
        lambda: api.get_or_none(f"/api/v1/namespaces/{UPGRADE_NS}/serviceaccounts/default"),
        60,
    )
    gcs_ft_admitted(api, ft_specs or {}, checks)
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "namespace": UPGRADE_NS},
        "spec": {**copy.deepcopy(spec), "upgradeStrategy": {"type": "NewCluster"}},
    }
    path = object_path("ray.io/v1", "RayService", UPGRADE_NS, name)
    api.request("POST", f"/apis/ray.io/v1/namespaces/{UPGRADE_NS}/rayservices", body)
    first = wait_for("the first RayCluster", lambda: (_clusters(api, UPGRADE_NS, name) or [None])[0], 60)
    log(f"upgrade: first RayCluster {first} (pending: Ray never serves here)")
    # EMULATED: the status the operator writes once the first cluster serves (promotion).
    status = {
        "status": {"activeServiceStatus": {"rayClusterName": first}, "pendingServiceStatus": {"rayClusterName": ""}}
    }
    api.request("PATCH", f"{path}/status", status, content_type="application/merge-patch+json")
    time.sleep(5)  # a reconcile or two on the promoted status
    live = api.get(path)
    checks.expect(
        (live.get("status") or {}).get("activeServiceStatus", {}).get("rayClusterName") == first
        and _clusters(api, UPGRADE_NS, name) == [first],
        "upgrade: the first RayCluster is the active one and the only one (emulated promotion kept)",
        str((live.get("status") or {}).get("activeServiceStatus")),
    )
    # A cluster change: a new environment variable in the head container changes the cluster's hash.
    head = live["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = [*(head.get("env") or []), {"name": "E2E_UPGRADE", "value": "1"}]
    patch = {
        "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [{**head, "env": env}]}}}}}
    }
    api.request("PATCH", path, patch, content_type="application/merge-patch+json")
    both = wait_for("a second RayCluster", lambda: c if len(c := _clusters(api, UPGRADE_NS, name)) == 2 else None, 90)
    time.sleep(15)  # the operator keeps reconciling: the old one must stay while the new one is pending
    now = _clusters(api, UPGRADE_NS, name)
    status = api.get(path).get("status") or {}
    active = status.get("activeServiceStatus", {}).get("rayClusterName")
    pending = status.get("pendingServiceStatus", {}).get("rayClusterName")
    log(f"upgrade: RayClusters {now}; active {active}, pending {pending}")
    checks.expect(
        both is not None and first in now and len(now) == 2 and active == first and pending in now and pending != first,
        "upgradeStrategy NewCluster: a cluster change starts a second RayCluster; the operator keeps the old, "
        "active one while the new one is pending (so a fixed GPU fleet needs room for both)",
        f"clusters {now}, active {active}, pending {pending}",
    )
    api.request("DELETE", path)
    gone = wait_for_gone(api, path, 60)
    checks.expect(gone and not _clusters(api, UPGRADE_NS, name), "upgrade: the RayService and both clusters are gone")
    api.request("DELETE", f"/api/v1/namespaces/{UPGRADE_NS}")


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cli_processes(project: Path) -> list[int]:
    """The `pulumi` CLI processes working in the stack's project directory (the Automation API's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if (
                argv
                and Path(argv[0].decode(errors="replace")).name == "pulumi"
                and os.readlink(entry / "cwd") == str(project)
            ):
                pids.append(int(entry.name))
    return pids


def kill_up_while_creating(stack, api: KubeClient, ray_service_path: str, log: Callable[[str], None]) -> dict:
    """Run `pulumi up` and SIGKILL the CLI and its plugins once the RayService exists in the API server while the
    CLI still waits on it (waitForReady: the create waits for a Ready that never comes here)."""
    outcome: dict = {}

    def run() -> None:
        try:
            stack.up("interrupted: killed while it creates the RayService")
            outcome["result"] = "finished (not interrupted)"
        except Exception as exc:  # the Automation API raises when the CLI dies
            outcome["result"] = f"{type(exc).__name__}: {str(exc)[-300:]}"

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for("the RayService being created", lambda: api.get_or_none(ray_service_path), 300)
    time.sleep(2)  # the create call returned to the provider, which now awaits Ready
    pids = [p for cli in cli_processes(stack.project) for p in _descendants(cli)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    log(f"interrupted up: SIGKILL to the pulumi CLI and its plugins {pids}")
    thread.join(timeout=120)
    outcome["killed"] = pids
    return outcome


def pending_operations(stack) -> list[str]:
    deployment = stack.stack.export_stack().deployment
    return [
        f"{op.get('type')} {op.get('resource', {}).get('urn', '')}" for op in deployment.get("pending_operations") or []
    ]
