"""KubeRayOperator: the KubeRay operator from its Helm chart, in its own namespace, on system nodes."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.helm import helm_release
from domain.facts import KUBERAY_NAMESPACE
from domain.placement import SYSTEM_LABELS
from domain.settings import ChartPin
from domain.sizing import OPERATOR_REQUESTS

NAMESPACE = KUBERAY_NAMESPACE


class KubeRayOperator(pulumi.ComponentResource):
    """Runs the RayService controller. It must outlive every RayService: v1.7 puts a finalizer on
    them that only the operator removes, so `destroy` would otherwise hang."""

    def __init__(self, name: str, pin: ChartPin, opts: pulumi.ResourceOptions, feature_gates: list[dict] | None = None):
        super().__init__("ray-llm-eks:kuberay:KubeRayOperator", name, None, opts)
        namespace = k8s.core.v1.Namespace(
            NAMESPACE, metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE), opts=pulumi.ResourceOptions(parent=self)
        )
        values = {
            "nodeSelector": SYSTEM_LABELS,
            "resources": {"requests": OPERATOR_REQUESTS.as_k8s(), "limits": OPERATOR_REQUESTS.as_k8s()},
        }
        if feature_gates is not None:  # domain/gcs_ft.py operator_feature_gates (rocksdb's alpha gate)
            values["featureGates"] = feature_gates
        self.release = helm_release(
            "kuberay-operator",
            pin,
            namespace.metadata.name,
            values,
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"release": self.release.name})
