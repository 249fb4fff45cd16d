"""Every external version the stack depends on, in one place. Each is overridable from stack config
(see README); the defaults are what the tests check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

DEFAULT_KUBERNETES_VERSION = "1.35"
# EKS version -> end of standard support (EKS Kubernetes version calendar). After that date the
# control plane moves to extended support at $0.60/h instead of $0.10/h. A NEW cluster needs at least
# NEW_CLUSTER_MIN_SUPPORT_DAYS left; a running one is only warned, so unrelated fixes still deploy
# (domain/preflight.py check_kubernetes_support).
KUBERNETES_VERSIONS: dict[str, date | None] = {
    "1.34": date(2026, 12, 2),
    "1.35": date(2027, 3, 27),
    "1.36": None,  # released; end date not yet in our table (later than 1.35's)
}
NEW_CLUSTER_MIN_SUPPORT_DAYS = 30


# Helm charts: (repository, chart, default version).
KUBERAY_CHART = ("https://ray-project.github.io/kuberay-helm/", "kuberay-operator", "1.7.0")
# 0.18.x: from v0.19.0 the plugin defaults --mofed-enabled to true and mounts /dev/infiniband into
# GPU containers, which conflicts with the EFA device plugin (EKS user guide, ml/node-efa).
NVIDIA_PLUGIN_CHART = ("https://nvidia.github.io/k8s-device-plugin", "nvidia-device-plugin", "0.18.2")
# eks-charts versions carry a leading "v" (stable/aws-efa-k8s-device-plugin/Chart.yaml).
# The AWS Load Balancer Controller: eks-charts stable/aws-load-balancer-controller, chart 3.5.0 = app v3.5.0.
LB_CONTROLLER_CHART = ("https://aws.github.io/eks-charts", "aws-load-balancer-controller", "3.5.0")
EFA_PLUGIN_CHART = ("https://aws.github.io/eks-charts", "aws-efa-k8s-device-plugin", "v0.5.30")
# EKS add-on of the Pod Identity agent. No source we can name lists its version per Kubernetes minor
# (eksctl, terraform-aws-eks and the EKS docs leave it to `aws eks describe-addon-versions`), so it is
# resolved at deploy time to EKS's default version for the cluster's minor (aws.eks.getAddonVersion,
# mostRecent false): never unset, never newer than EKS's default; offline it is a placeholder.
POD_IDENTITY_AGENT_ADDON = "eks-pod-identity-agent"
# kubernetes/autoscaler tag cluster-autoscaler-chart-9.59.0 (appVersion 1.35.0). Its image is picked
# per Kubernetes minor: the Cluster Autoscaler README asks for the release matching the cluster's minor
# (newest patch tags of each minor in that repository).
CLUSTER_AUTOSCALER_CHART = ("https://kubernetes.github.io/autoscaler", "cluster-autoscaler", "9.59.0")
CLUSTER_AUTOSCALER_IMAGE_TAGS = {"1.34": "v1.34.5", "1.35": "v1.35.2", "1.36": "v1.36.1"}
# The chart's image.repository is <us-west-2 registry>/eks/aws-efa-k8s-device-plugin (values.yaml); we
# keep the path and the chart's tag, and swap the registry for the region's own.
EFA_PLUGIN_IMAGE_REPOSITORY = "eks/aws-efa-k8s-device-plugin"


@dataclass(frozen=True)
class ServingImage:
    """One AWS Ray LLM Deep Learning Container release and what is inside it."""

    tag: str
    ray: str
    vllm: str


# aws/deep-learning-containers docs/ray-llm/changelog: "Ray LLM v1.0 — 2026-08-31": Ray 2.58.0,
# vLLM 0.26.0, PyTorch 2.11.0, CUDA 13.0.2, Python 3.13; ships NIXL, libfabric, aws-ofi-nccl.
DLC_IMAGES = {
    "serve-llm-cuda-v1.0.0": ServingImage(tag="serve-llm-cuda-v1.0.0", ray="2.58.0", vllm="0.26.0"),
}
DEFAULT_DLC_TAG = "serve-llm-cuda-v1.0.0"
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
