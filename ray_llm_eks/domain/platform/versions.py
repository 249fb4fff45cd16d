"""What the stack knows about the external versions it depends on: where each chart comes from,
the EKS support calendar, what each serving image holds. The default version of each (chart
versions, Kubernetes version, DLC tag) is the stack key's default in ray_llm_eks/domain/data/config_keys.yaml,
overridable per stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

# EKS version -> end of standard support (EKS Kubernetes version calendar). After that date the
# control plane moves to extended support at $0.60/h instead of $0.10/h. A NEW cluster needs at least
# NEW_CLUSTER_MIN_SUPPORT_DAYS left; a running one is only warned, so unrelated fixes still deploy
# (ray_llm_eks/domain/checks/preflight.py check_kubernetes_support).
KUBERNETES_VERSIONS: dict[str, date | None] = {
    "1.34": date(2026, 12, 2),
    "1.35": date(2027, 3, 27),
    "1.36": None,  # released; end date not yet in our table (later than 1.35's)
}
NEW_CLUSTER_MIN_SUPPORT_DAYS = 30


@dataclass(frozen=True)
class ChartPin:
    """A Helm chart at an exact version (the stack's, or a component Args' own)."""

    repo: str
    chart: str
    version: str


# Helm charts: (repository, chart); each version is a stack key (kuberayVersion, ...) whose default,
# and why it is that version, is in ray_llm_eks/domain/data/config_keys.yaml.
KUBERAY_CHART = ("https://ray-project.github.io/kuberay-helm/", "kuberay-operator")
NVIDIA_PLUGIN_CHART = ("https://nvidia.github.io/k8s-device-plugin", "nvidia-device-plugin")
LB_CONTROLLER_CHART = ("https://aws.github.io/eks-charts", "aws-load-balancer-controller")
EFA_PLUGIN_CHART = ("https://aws.github.io/eks-charts", "aws-efa-k8s-device-plugin")
# EKS add-on of the Pod Identity agent. No source we can name lists its version per Kubernetes minor
# (eksctl, terraform-aws-eks and the EKS docs leave it to `aws eks describe-addon-versions`), so `make pin`
# asks AWS for EKS's default version for the cluster's minor once and the stack keeps it (eksAddonVersions,
# ray_llm_eks/domain/platform/pins.py); a dev stack without it resolves that default at deploy
# (aws.eks.getAddonVersion, mostRecent false); offline it is a placeholder.
POD_IDENTITY_AGENT_ADDON = "eks-pod-identity-agent"
# The Cluster Autoscaler's image is picked per Kubernetes minor: its README asks for the release
# matching the cluster's minor (newest patch tags of each minor in kubernetes/autoscaler).
CLUSTER_AUTOSCALER_CHART = ("https://kubernetes.github.io/autoscaler", "cluster-autoscaler")
CLUSTER_AUTOSCALER_IMAGE_TAGS = {"1.34": "v1.34.5", "1.35": "v1.35.2", "1.36": "v1.36.1"}
# Karpenter's chart is an OCI artifact (aws/karpenter-provider-aws getting-started step08-apply-helm-chart.sh).
KARPENTER_CHART = ("oci://public.ecr.aws/karpenter", "karpenter")
# Observability (ray_llm_eks/domain/telemetry/observability.py); their versions' reasons are in
# ray_llm_eks/domain/data/config_keys.yaml.
KUBE_PROMETHEUS_STACK_CHART = ("https://prometheus-community.github.io/helm-charts", "kube-prometheus-stack")
DCGM_EXPORTER_CHART = ("https://nvidia.github.io/dcgm-exporter/helm-charts", "dcgm-exporter")  # its README
# EKS add-on of the EBS CSI driver, resolved at deploy time like the Pod Identity agent (below).
EBS_CSI_ADDON = "aws-ebs-csi-driver"
# The chart's image.repository is <us-west-2 registry>/eks/aws-efa-k8s-device-plugin (values.yaml); we
# keep the path and the chart's tag, and swap the registry for the region's own.
EFA_PLUGIN_IMAGE_REPOSITORY = "eks/aws-efa-k8s-device-plugin"


@dataclass(frozen=True)
class ServingImage:
    """One AWS Ray LLM Deep Learning Container release and what is inside it."""

    tag: str
    ray: str
    vllm: str
    nixl: str

    def components(self) -> dict[str, str]:
        """Component -> version, as ray_llm_eks/domain/checks/known_issues.py reads them."""
        return {"ray": self.ray, "vllm": self.vllm, "nixl": self.nixl}


# aws/deep-learning-containers docs/ray-llm/changelog: "Ray LLM v1.0 — 2026-08-31": Ray 2.58.0,
# vLLM 0.26.0, PyTorch 2.11.0, CUDA 13.0.2, Python 3.13; ships NIXL, libfabric, aws-ofi-nccl. Its NIXL is
# ray[llm]'s pin (docker/ray_llm/pyproject.toml installs ray[default,serve,llm]; Ray 2.58.0's METADATA:
# nixl==1.3.1, nixl-cu13==1.3.1).
DLC_IMAGES = {
    "serve-llm-cuda-v1.0.0": ServingImage(tag="serve-llm-cuda-v1.0.0", ray="2.58.0", vllm="0.26.0", nixl="1.3.1"),
}
DLC_REPOSITORY = "ray"

# ECR registry account of the DLC images per region (aws/deep-learning-containers
# docs/reference/region_availability.md). 763104351884 serves most regions, not all.
_DLC_MAIN_ACCOUNT = "763104351884"
DLC_ACCOUNTS = {
    **dict.fromkeys(
        (
            "us-east-1",
            "us-east-2",
            "us-west-1",
            "us-west-2",
            "ap-south-1",
            "ap-northeast-1",
            "ap-northeast-2",
            "ap-southeast-1",
            "ap-southeast-2",
            "ca-central-1",
            "sa-east-1",
            "eu-central-1",
            "eu-west-1",
            "eu-west-2",
            "eu-west-3",
            "eu-north-1",
        ),
        _DLC_MAIN_ACCOUNT,
    ),
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-south-2": "772153158452",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ap-northeast-3": "364406365360",
    "ca-west-1": "204538143572",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-central-2": "380420809688",
    "il-central-1": "780543022126",
    "mx-central-1": "637423239942",
    "me-south-1": "217643126080",
    "me-central-1": "914824155844",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
}
