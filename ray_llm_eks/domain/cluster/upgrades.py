"""What a stack change does to a running service, and the RayService upgradeStrategy that decides it.

KubeRay 1.7 RayService `spec.upgradeStrategy.type` (ray-operator apis/ray/v1/rayservice_types.go):
- `NewCluster`: a change of `rayClusterConfig` makes a second RayCluster beside the running one; traffic
  moves once the new one serves. It needs a second set of GPUs for the switch: with a fixed GPU fleet the new
  cluster's workers stay Pending and the RayService never finishes its upgrade.
- `NewClusterWithIncrementalUpgrade`: the same, traffic shifted in steps through a Gateway API
  implementation (`clusterUpgradeOptions.gatewayClassName`); not offered here (no Gateway controller).
- `None`: KubeRay never makes a second cluster; a `rayClusterConfig` change is not applied to the running
  one at all. So with `None` the program replaces the RayService (Pulumi delete-before-replace,
  ray_llm_eks/components/llm_service.py): a gap in service of one cluster start plus one model load per engine.

A `serveConfigV2` change is applied to the running cluster under every strategy (KubeRay submits it to the
Serve REST API): a replica count or autoscaling change is a reconfigure; any other change of an LLM config
(engine arguments, model, runtime env) makes Serve replace that deployment's replicas, each engine loading
its model again, one replica at a time (Serve's rolling update): with one replica and no spare GPU, a gap.

A node group change that EKS applies by replacing instances (AMI, instance type, disk, launch template)
drains each node: the Ray worker on it restarts elsewhere or waits for the new node. Pure: no I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.core.raw_config import RawConfig

STRATEGIES = ("None", "NewCluster")
IN_PLACE = "served in place"
ROLLING = "replicas restarted in place"
NEW_CLUSTER = "new RayCluster beside the old"
REPLACED = "RayService replaced (gap)"
NODES = "node replacement"
OTHER = "no effect on serving"
# A region change: pulumi-aws replaces every resource of the provider whose region changed (pulumi-aws #4000,
# "Replace resources when the AWS region changes": DiffConfig asks for the provider's replacement, which
# cascades to all its resources), the EKS cluster among them; the Kubernetes provider built from the new
# cluster's kubeconfig then points at another cluster, and every object on it is created there anew.
REGION = "replaced (region change)"
# Serve's deployment fields it changes without restarting replicas (ray/serve/_private/config.py
# DeploymentConfig: num_replicas, autoscaling_config, user_config, max_ongoing_requests... are "lightweight").
LIGHTWEIGHT = ("num_replicas", "autoscaling_config", "user_config", "max_ongoing_requests", "graceful_shutdown")
# ManagedNodeGroup inputs EKS changes without replacing instances.
NODE_GROUP_IN_PLACE = ("scalingConfig", "labels", "taints", "tags", "updateConfig")


def load(raw: RawConfig, pools: Mapping[str, tuple[int, int]]) -> str:
    """The stack's `upgradeStrategy`, against the pools' (desiredSize, maxSize) by role."""
    return strategy(raw.text("upgradeStrategy"), pools)


def strategy(requested: str | None, pools: Mapping[str, tuple[int, int]]) -> str:
    """The stack's upgradeStrategy (None: unset -> `None`, every stack: GPU fleets are sized for one
    cluster). `NewCluster` is refused unless every pool's maxSize holds two clusters (`pools`: role ->
    (desiredSize, maxSize)): otherwise the second cluster waits for GPUs forever."""
    chosen = requested or "None"
    if chosen not in STRATEGIES:
        raise ConfigError("upgradeStrategy", chosen, f"one of {', '.join(STRATEGIES)}")
    if chosen == "NewCluster":
        short = [f"{role} maxSize {mx} < 2 x desiredSize {want}" for role, (want, mx) in sorted(pools.items())
                 if mx < 2 * want]  # fmt: skip
        if short:
            raise ConfigError(
                "upgradeStrategy", chosen, f"NewCluster needs room for a second cluster's GPUs: {'; '.join(short)}"
            )
    return chosen


@dataclass(frozen=True)
class Impact:
    kind: str
    resource: str
    line: str


def _paths(old, new, prefix: str = "") -> list[str]:
    """Leaf paths where two JSON values differ (lists by index)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [p for k in keys for p in _paths(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else k)]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [p for i, (a, b) in enumerate(zip(old, new, strict=True)) for p in _paths(a, b, f"{prefix}[{i}]")]
    return [] if old == new else [prefix]


def _matches(path: str, pattern: str) -> bool:
    """Pulumi's replaceOnChanges semantics: the pattern (with [*] and ["key"]) contains the changed path."""
    regex = re.escape(pattern).replace(r"\[\*\]", r"\[\d+\]")
    regex = re.sub(r'\\\[\\"([^"]+)\\"\\\]', lambda m: r"\." + m.group(1), regex)
    norm = re.sub(r'\["([^"]+)"\]', r".\1", path)
    return re.match(regex + r"($|[.\[])", norm) is not None


def _serve_changes(old_yaml: str, new_yaml: str, load) -> list[str]:
    """One line per changed Serve field: reconfigured in place, or the deployment's replicas restarted."""
    lines = []
    for path in _paths(load(old_yaml) or {}, load(new_yaml) or {}):
        segments = re.split(r"[.\[\]]+", path)
        light = any(field in segments for field in LIGHTWEIGHT)
        lines.append(f"{path} ({'reconfigured in place' if light else 'replicas restarted'})")
    return lines


def ray_service_impact(old: dict, new: dict, options: Mapping, load_yaml) -> list[Impact]:
    """The RayService's change: its inputs (`spec`) and options (replaceOnChanges) as the plan recorded them."""
    name = new.get("name", "rayservice")
    changed = _paths(old.get("spec") or {}, new.get("spec") or {}, "spec")
    changed += _paths((old.get("metadata") or {}).get("annotations") or {},
                      (new.get("metadata") or {}).get("annotations") or {}, "metadata.annotations")  # fmt: skip
    if not changed:
        return []
    replace = [p for p in changed if any(_matches(p, pat) for pat in options.get("replaceOnChanges") or [])]
    strat = ((new.get("spec") or {}).get("upgradeStrategy") or {}).get("type", "NewCluster")
    cluster = [p for p in changed if p.startswith("spec.rayClusterConfig")]
    if replace:
        return [Impact(REPLACED, name, f"{replace[0]} changed: the RayService is deleted, then created "
                       "(upgradeStrategy None): no endpoint from the delete until the new cluster's engines "
                       "have loaded their model (docs/faults-and-upgrades.md)")]  # fmt: skip
    impacts = []
    if cluster and strat.startswith("NewCluster"):
        impacts.append(Impact(NEW_CLUSTER, name, f"{cluster[0]} changed: KubeRay starts a second RayCluster and "
                              "switches once it serves: it needs a second set of GPUs meanwhile"))  # fmt: skip
    elif cluster:
        impacts.append(Impact(OTHER, name, f"{cluster[0]} changed but upgradeStrategy None applies no cluster "
                              "change to a running cluster (only the autoscaler's replicas move)"))  # fmt: skip
    if "spec.serveConfigV2" in changed:
        lines = _serve_changes(old["spec"]["serveConfigV2"], new["spec"]["serveConfigV2"], load_yaml)
        restarts = [line for line in lines if "replicas restarted" in line]
        kind = ROLLING if restarts else IN_PLACE
        what = ("Serve replaces the changed deployments' replicas one at a time, each engine loading its model "
                "again (a role with one replica and no spare GPU has a gap)") if restarts else \
            "Serve reconfigures the running replicas (no engine restart)"  # fmt: skip
        impacts.append(Impact(kind, name, f"serveConfigV2: {'; '.join(lines[:4])}: {what}"))
    return impacts


def node_group_impact(name: str, old: dict, new: dict) -> list[Impact]:
    changed = [p for p in _paths(old, new) if p.split(".")[0].split("[")[0] not in NODE_GROUP_IN_PLACE]
    if changed:
        return [Impact(NODES, name, f"{changed[0]} changed: EKS replaces the nodes one by one; the Ray workers on "
                       "them restart and load their model again")]  # fmt: skip
    if _paths(old, new):
        return [Impact(IN_PLACE, name, "scaling, labels or tags changed: no node replaced")]
    return []


def _stackless(urn: str) -> str:
    """A URN without its stack's name (urn:pulumi:<stack>::<project>::<type chain>::<name>): two plans of one
    stack file under two stack names (a copy of dev) compare resource by resource."""
    return re.sub(r"^urn:pulumi:[^:]+::", "urn:pulumi:*::", urn)


def region_change(old: Iterable[dict], new: Iterable[dict], regions: tuple[str, str]) -> list[Impact]:
    """Every resource of a plan in another region: replaced (the ones in both), created or deleted (a name with
    the zone in it)."""
    before = {_stackless(r["urn"]): r for r in old}
    after = {_stackless(r["urn"]): r for r in new}
    moved = f"aws:region {regions[0]} -> {regions[1]}"
    lines = [
        Impact(
            REGION,
            "the stack",
            f"{moved}: every resource is replaced: a new cluster, its nodes and the service are built in "
            f"{regions[1]} as on a first `up` (tens of minutes) and everything in {regions[0]} is deleted; the "
            "endpoint's addresses change with them",
        )
    ]
    for urn, r in sorted(after.items()):
        what = "replaced" if urn in before else f"created in {regions[1]}"
        lines.append(Impact(REGION, r["name"], f"{r['type']} {what}"))
    lines += [Impact(REGION, r["name"], f"{r['type']} deleted from {regions[0]}") for u, r in sorted(before.items())
              if u not in after]  # fmt: skip
    return lines


def impacts(
    old: Iterable[dict], new: Iterable[dict], load_yaml=json.loads, regions: tuple[str, str] | None = None
) -> list[Impact]:
    """Two plans' resources.json (offline/plan.py) -> what the change from `old` to `new` does to a running
    service, one Impact per changed resource that matters (others: one OTHER line each). `regions`: the two
    plans' regions (their outputs), where known; a change of region replaces everything."""
    old, new = list(old), list(new)
    if regions is not None and regions[0] != regions[1]:
        return region_change(old, new, regions)
    before = {_stackless(r["urn"]): r for r in old}
    result = []
    for r in new:
        prior = before.pop(_stackless(r["urn"]), None)
        if prior is None:
            result.append(Impact(OTHER, r["name"], f"{r['type']} created"))
            continue
        if prior.get("inputs") == r.get("inputs"):
            continue
        if r["type"].endswith(":RayService"):
            result += ray_service_impact(prior["inputs"], r["inputs"], r.get("options") or {}, load_yaml)
        elif r["type"] == "eks:index:ManagedNodeGroup":
            result += node_group_impact(r["name"], prior["inputs"], r["inputs"])
        else:
            result.append(Impact(OTHER, r["name"], f"{r['type']} updated"))
    result += [Impact(OTHER, before[u]["name"], f"{before[u]['type']} deleted") for u in sorted(before)]
    return result


def report(found: list[Impact]) -> str:
    if not found:
        return "No change that reaches the running service."
    order = (REGION, REPLACED, NEW_CLUSTER, NODES, ROLLING, IN_PLACE, OTHER)
    lines = ["What this change does to a running service:"]
    for kind in order:
        for impact in (i for i in found if i.kind == kind):
            lines.append(f"  [{kind}] {impact.resource}: {impact.line}")
    return "\n".join(lines)


def summary(
    strategy_type: str,
    single_replica_roles: Iterable[str],
    karpenter_nodes: bool = False,
    auto_mode_nodes: bool = False,
) -> list[str]:
    """What each kind of stack change does to the running service under this stack's strategy (`make plan`);
    `karpenter_nodes`: Karpenter makes the GPU nodes (nodeProvisioning), which replaces drifted ones itself;
    `auto_mode_nodes`: EKS Auto Mode makes them, and replaces each within 21 days whatever runs on it."""
    single = sorted(single_replica_roles)
    gap = f" (roles with one replica: {', '.join(single)}: a gap while it reloads)" if single else ""
    cluster = (
        "a Ray cluster change (image, Ray version, pod templates, worker groups or bounds, GCS options) deletes "
        "the RayService and creates it again: no endpoint until the new cluster's engines have loaded the model "
        "(about a minute per engine on warm nodes, tens of minutes on new ones: docs/operations.md, "
        "What a start costs)"
        if strategy_type == "None"
        else "a Ray cluster change starts a second RayCluster beside the running one, which serves until the new "
        "one does: the GPU pools must hold both meanwhile"
    )
    return [
        f"upgradeStrategy {strategy_type}: {cluster}",
        "serve config change: applied in place; replicas or autoscaling: reconfigured, no engine restart; engine "
        f"arguments or model: Serve replaces that role's replicas one at a time, each engine loading again{gap}",
        (
            "node class or pool change (AMI release, instance types, disk): Karpenter marks the GPU nodes drifted "
            "and replaces one at a time only once it runs no Ray worker (do-not-disrupt): a serving node keeps "
            "the old AMI until its worker is scaled down or the RayService is replaced"
            if karpenter_nodes
            else "node class or pool change (instance types, disk): Auto Mode replaces the GPU nodes; it also "
            "replaces every node within 21 days and picks its AMI itself (EKS user guide auto-security): plan "
            "for a replica restart per node at least that often"
            if auto_mode_nodes
            else "node group change (AMI release, instance type, disk): EKS replaces the nodes one at a time; the "
            "Ray workers on them start again elsewhere or on the new node"
        ),
        "`make diff A=<plan dir> B=<plan dir>` names what one given change does",
    ]
