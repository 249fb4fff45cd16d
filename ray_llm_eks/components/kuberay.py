"""KubeRayOperator: the KubeRay operator from its Helm chart, in its own namespace, on system nodes.

No `from __future__ import annotations`: the component provider host reads the Args' annotations as types
(ray_llm_eks/components/llm_service.py says where)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.helm import helm_release
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.facts import KUBERAY_NAMESPACE
from ray_llm_eks.domain.platform.field_checks import check_chart_version
from ray_llm_eks.domain.platform.placement import SYSTEM_LABELS
from ray_llm_eks.domain.platform.sizing import OPERATOR_REQUESTS
from ray_llm_eks.domain.platform.versions import KUBERAY_CHART, ChartPin
from ray_llm_eks.domain.security import pod_security

NAMESPACE = KUBERAY_NAMESPACE
ARGS = "KubeRayOperatorArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())


@dataclass(frozen=True)
class KubeRayOperatorArgs:
    """The operator's chart version and feature gates; it runs in the namespace kuberay-system."""

    chart_version: str | None = default("kuberayVersion")
    """The kuberay-operator chart's exact version (config key kuberayVersion says why this default)."""
    feature_gates: Sequence[Mapping[str, Any]] | None = None
    """The chart's featureGates ({name, enabled} each; ray_llm_eks/domain/cluster/gcs_ft.py's for rocksdb); none: the
    chart's."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_chart_version("chart_version", self.chart_version, KUBERAY_CHART[1], default("kuberayVersion"), ARGS)


class KubeRayOperator(pulumi.ComponentResource):
    """Runs the RayService controller. It must outlive every RayService: v1.7 puts a finalizer on
    them that only the operator removes, so `destroy` would otherwise hang."""

    TYPE = "ray-llm-eks:kuberay:KubeRayOperator"  # the shipped program's resources keep their URNs

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        namespace = k8s.core.v1.Namespace(
            NAMESPACE,
            metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE, labels=pod_security.labels(pod_security.KUBERAY)),
            opts=pulumi.ResourceOptions(parent=self),
        )
        values = {
            "nodeSelector": SYSTEM_LABELS,
            "resources": {"requests": OPERATOR_REQUESTS.as_k8s(), "limits": OPERATOR_REQUESTS.as_k8s()},
        }
        # ray_llm_eks/domain/cluster/gcs_ft.py operator_feature_gates (rocksdb's alpha gate)
        if args.feature_gates is not None:
            values["featureGates"] = [dict(gate) for gate in args.feature_gates]
        self.release = helm_release(
            "kuberay-operator",
            ChartPin(*KUBERAY_CHART, args.chart_version),
            namespace.metadata.name,
            values,
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"release": self.release.name})
