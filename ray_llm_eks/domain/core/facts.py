"""Facts the program and its policy pack share, each written once: names, ports, roles, markers.
Standard library only, and importing nothing: the policy pack imports this module in its own venv
(policy/venv) and under the Pulumi CLI, where only its own requirements are installed."""

from __future__ import annotations

PROJECT = "ray-llm-eks"  # the config namespace and the type tokens' package

# What a Pulumi secret reads as anywhere outside Pulumi: stack files read offline, `make plan`'s
# rendered files and outputs, a secret key's value inside ray_llm_eks/domain/.
SECRET_MARKER = "[secret]"

# The `environment` setting; hardening that differs between environments keys on it, never on the
# stack's name (users copy `dev` under other names).
ENVIRONMENTS = ("dev", "staging", "production")
DEV_ENVIRONMENTS = ("dev",)  # the only ones whose public API endpoint may stay open to the internet
ENVIRONMENT_TAG = f"{PROJECT}:environment"  # on the EKS cluster: the policy pack reads it there
NAT_MODES = ("single", "perAz")  # the `natGateways` setting: one NAT in the GPU zone, or one per zone
ENVIRONMENT_ANNOTATION = f"{PROJECT}/environment"  # on the RayService: the pack reads it there

# Serve roles: what an LLM config of the serve application runs. PD apps have prefill and decode,
# the collocated baseline has one. A GPU pool runs one role (its own name unless it says `serves`).
PD_ROLES = ("prefill", "decode")  # their pools move the KV cache over EFA
COLLOCATED_ROLE = "collocated"
GPU_ROLES = (*PD_ROLES, COLLOCATED_ROLE)
# The NIXL backend a KV connector uses where kv_connector_extra_config.backends is unset (vLLM 0.26
# nixl/base_worker.py).
NIXL_DEFAULT_BACKEND = "UCX"
# The Ray custom resource a worker group advertises and its role's LLM deployment asks for is
# POOL_RESOURCE_PREFIX + role: Ray then cannot put a prefill replica on a decode node.
POOL_RESOURCE_PREFIX = "pool_"
# The node label naming a node's pool (a GPU pool's name, or `system`): on the node groups, in the
# Cluster Autoscaler's node-template tags and in the Ray pods' nodeSelector. It was `role` before
# (docs/upgrade-notes.md): it holds a pool's name, which is a role only when the pool is named after one.
POOL_NODE_LABEL = f"{PROJECT}/pool"

# EC2's instance metadata service (IPv4; its IPv6 endpoint stays off: EC2's default, which pulumi-eks
# nodegroup.ts metadataOptions keeps): what the Ray namespace's egress policy keeps pods from.
INSTANCE_METADATA_CIDR = "169.254.169.254/32"
# The instance metadata options of every node's launch template: session tokens only (IMDSv2) and a
# PUT response hop limit of 1, so a session token never reaches a pod on the node's pod network (a pod
# is one hop further than the node). Names: botocore's ec2 LaunchTemplateInstanceMetadataOptionsRequest
# members, camelCased as aws.ec2.LaunchTemplate's metadataOptions takes them; hop limit 1 to 64 there.
NODE_METADATA_OPTIONS = {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}

# The Ray workers' service account where they read the weights from S3 (`modelSource: s3://...`): its
# EKS Pod Identity association gives them read access to those prefixes, not the node role.
WEIGHTS_SERVICE_ACCOUNT = "ray-weights"

# A container image pinned by digest (the tag, where kept, is for people: the kubelet pulls the digest).
# Offline the digest of a tag is not known (`make plan` calls no registry): the image then ends in
# `@` + IMAGE_DIGEST_PLACEHOLDER, which `pulumi preview`/`up` replace with the registry's digest.
IMAGE_DIGEST = r"@sha256:[0-9a-f]{64}"
IMAGE_DIGEST_PLACEHOLDER = "<sha256 digest of the tag, looked up in the registry at deploy time>"

# Ports of the Ray head (KubeRay's defaults); the serve port is also every worker's.
SERVE_PORT = 8000  # Ray Serve's HTTP proxy: the only Ray port reachable from outside the namespace
DASHBOARD_PORT = 8265  # ...besides the head's dashboard, for the KubeRay operator only
HEAD_PORTS = {"gcs-server": 6379, "dashboard": DASHBOARD_PORT, "client": 10001, "metrics": 8080, "serve": SERVE_PORT}

# Ray's metrics ports: KubeRay's `metrics` on every Ray container (v1.7.0 utils/constant.go
# DefaultMetricsPort), and on the head the autoscaler monitor's and the dashboard's own (Ray 2.58
# autoscaler/_private/constants.py AUTOSCALER_METRIC_PORT, dashboard/consts.py DASHBOARD_METRIC_PORT).
# Prometheus scrapes them (PodMonitors); the namespace whose Prometheus does is named on the
# NetworkPolicy that admits it, for the policy pack.
HEAD_METRICS_PORTS = {"metrics": HEAD_PORTS["metrics"], "as-metrics": 44217, "dash-metrics": 44227}
PROMETHEUS_NAMESPACE_ANNOTATION = f"{PROJECT}/prometheus-namespace"
# The Prometheus Operator's PodMonitor, as Pulumi types it (the policy pack looks for them).
POD_MONITOR_TYPE = "kubernetes:monitoring.coreos.com/v1:PodMonitor"

# Where our KubeRay operator runs (an existing cluster's may run elsewhere: kuberayNamespace), and
# the annotation on the NetworkPolicy that opens the dashboard naming the namespace it admits.
KUBERAY_NAMESPACE = "kuberay-system"
OPERATOR_NAMESPACE_ANNOTATION = f"{PROJECT}/kuberay-operator-namespace"

# The ingress class every Serve application answers through: it checks the API key
# (ray_llm_eks/serve_ingress/api_key_ingress.py, shipped to the pods as a flat module).
KEY_CHECKED_INGRESS = "api_key_ingress:ApiKeyIngress"

# Extended resources the device plugins advertise on GPU nodes.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"

# An exact chart version (Helm accepts ranges such as ^1.7 too; the stack and the pack refuse them).
EXACT_CHART_VERSION = r"v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?"
