"""LlmService: the namespace, the Hugging Face token Secret and the RayService that serves the model
behind one OpenAI-compatible endpoint, on any cluster that runs the KubeRay operator.

No `from __future__ import annotations` here: Pulumi's component provider host reads the Args' and the
component's annotations as types (pulumi/provider/experimental/analyzer.py, inspect.get_annotations)."""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from ray_llm_eks.adapters import stack
from ray_llm_eks.components.args import fill_defaults
from ray_llm_eks.components.network_policies import NamespaceNetworkPolicies
from ray_llm_eks.domain.cluster import gcs_ft
from ray_llm_eks.domain.core.config_keys import default
from ray_llm_eks.domain.core.errors import PROJECT, ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import ENVIRONMENT_ANNOTATION, HEAD_PORTS, SERVE_PORT
from ray_llm_eks.domain.platform.field_checks import (
    check_environment,
    check_namespace,
    check_ready_timeout,
    check_service_name,
)
from ray_llm_eks.domain.render.ray_service import (
    HF_TOKEN_KEY,
    HF_TOKEN_SECRET,
    ray_service_spec,
    replacement_paths,
    worker_groups_annotation,
)
from ray_llm_eks.domain.security import pod_security, ray_auth, secret_content
from ray_llm_eks.domain.serving import api_keys, serve_config

ARGS = "LlmServiceArgs"  # names the Args in a bad field's line (ray_llm_eks/domain/core/errors.py line())
# The Args' fields a RayService is rendered from, by the stack key that takes the same value (docs/configuration.md):
# the typed inputs pass the stack keys' own checks, and a refusal names the field back.
STACK_KEYS = {
    "gpu_pools": "gpuPools", "environment": "environment", "api_key_check": "apiKeyCheck", "namespace": "namespace",
    "service_name": "serviceName", "ready_timeout_seconds": "serviceReadyTimeoutSeconds",
    "serve_config": "serveConfig", "model_id": "modelId", "model_source": "modelSource",
    "max_model_len": "maxModelLen", "image": "image", "ray_version": "rayVersion",
    "gcs_fault_tolerance": "gcsFaultTolerance",
}  # fmt: skip
FIELD_OF_KEY = {key: field for field, key in STACK_KEYS.items()} | {"aws:region": "region"}


def named_service_accounts(spec: Mapping[str, Any]) -> list[str]:
    """The service accounts the worker templates name (the weights' reader, ray_llm_eks/domain/render/ray_service.py):
    the component creates them. The head names none (KubeRay gives it its autoscaler's, or the namespace's default)."""
    groups = spec.get("rayClusterConfig", {}).get("workerGroupSpecs") or []
    return sorted({n for g in groups if (n := g.get("template", {}).get("spec", {}).get("serviceAccountName"))})


def auth_secret_name(spec: Mapping[str, Any]) -> str | None:
    """The Secret of Ray's token the spec's authOptions names (token mode): the component creates it."""
    options = spec.get("rayClusterConfig", {}).get("authOptions") or {}
    return options.get("secretName") if options.get("mode") == "token" else None


# A pool's fields by the key of a stack's gpuPools entry that takes the same value (docs/configuration.md).
POOL_KEYS = {"instance_type": "instanceType", "min_size": "minSize", "desired_size": "desiredSize",
             "max_size": "maxSize", "serves": "serves"}  # fmt: skip


@dataclass(frozen=True)
class GpuPoolInput:
    """One GPU node group of the cluster the service's Ray workers run on: a ray-llm-eks stack's `gpuPools` entry
    (docs/configuration.md), checked as the stack's are."""

    name: str
    """The serve config's role it runs (prefill, decode or collocated), or a name of yours with `serves`."""
    instance_type: str
    """The nodes' EC2 instance type: a GPU type the stack knows (with EFA for prefill and decode)."""
    min_size: int | None = None
    """Fewest nodes (1 where unset)."""
    desired_size: int | None = None
    """Nodes to start with (1 where unset)."""
    max_size: int | None = None
    """Most nodes (1 where unset)."""
    serves: str | None = None
    """The role a pool of another name runs."""

    def stack_value(self) -> dict[str, Any]:
        """This pool as the stack's gpuPools entry."""
        return {key: value for field, key in POOL_KEYS.items() if (value := getattr(self, field)) is not None}


@dataclass(frozen=True)
class LlmServiceArgs:
    """What the PD LLM service deploys: a RayService and the objects around it in its namespace. The component renders
    the RayService from the model, the GPU pools and the serving application (`gpu_pools`, `region`, `serve_config`,
    ...), or takes one already rendered (`ray_service_spec`): one of the two."""

    ray_service_spec: Mapping[str, Any] | None = None
    """A RayService spec already rendered (serveConfigV2, rayClusterConfig with its workerGroupSpecs,
    upgradeStrategy; ray_llm_eks.domain.render.ray_service.ray_service_spec renders one from a stack)."""
    model_id: str | None = None
    """The served model's id, as clients name it (the serve config's model_loading_config.model_id); with
    `gpu_pools`, the serve config's where unset."""
    gpu_pools: Sequence[GpuPoolInput] | None = None
    """The GPU node groups the Ray workers run on, one per role of the serve config: the component renders the
    RayService for them."""
    region: str | None = None
    """The AWS region of the cluster (with `gpu_pools`): the instance types' facts, the weights' S3 region."""
    serve_config: str | None = None
    """With `gpu_pools`: the serving application, a shipped one (pd-disaggregated where unset, collocated,
    pd-xpyd, tensor-parallel, data-parallel)."""
    model_source: str | None = None
    """With `gpu_pools`: where the weights come from (a Hugging Face repository or an s3:// prefix); the serve
    config's where unset."""
    max_model_len: int | None = None
    """With `gpu_pools`: the longest request in tokens; the serve config's where unset."""
    image: str | None = None
    """With `gpu_pools`: the serving image, `repo:tag@sha256:...` (with `ray_version`); where unset the AWS Deep
    Learning Container the stack pins, by its tag (the stack's program looks its digest up at `up`, the component
    does not)."""
    ray_version: str | None = None
    """The Ray version inside `image` (required with it)."""
    gcs_fault_tolerance: str | None = None
    """With `gpu_pools`: the Ray head's GCS fault tolerance, off (where unset) or rocksdb; a GcsStore's redis takes a
    spec rendered with it (`ray_service_spec`, as the stack's program renders one)."""
    namespace: str | None = default("namespace")
    """The RayService's namespace, created by the component (a DNS label, not default, kube-* or the operator's)."""
    service_name: str | None = default("serviceName")
    """The RayService's name (a DNS-1035 label of at most 47 characters)."""
    environment: str | None = default("environment")
    """The environment annotation the policy pack reads (a RayService without the key check only in dev)."""
    api_key_check: bool | None = default("apiKeyCheck")
    """Deploy the key-checking ingress's code and the keys Secret (the spec must run that ingress)."""
    ingress_modules: Sequence[str] | None = None
    """Shipped modules the pods import, of api_keys.SHIPPED_MODULES; none: all of them."""
    network_policies: Sequence[Mapping[str, Any]] | None = ()
    """NetworkPolicy manifests for the namespace (ray_llm_eks.domain.security.network_policies renders them), before any
    Ray pod."""
    wait_for_ready: bool | None = True
    """Wait until the RayService is Ready; false: return once the object is accepted (CI deploys)."""
    ready_timeout_seconds: int | None = default("serviceReadyTimeoutSeconds")
    """How long to wait for Ready (600 to 14400: image pull, weight download, engine start)."""
    hf_token: pulumi.Input[str] | None = None
    """The Hugging Face token (a secret), put in the Secret the spec's pods read; none: no Secret."""
    api_keys: pulumi.Input[str] | None = None
    """The endpoint's API keys (a secret, comma- or newline-separated); none: one is generated (output apiKey)."""
    ray_auth_token: pulumi.Input[str] | None = None
    """The Ray cluster's token (a secret, at least 32 characters); none: a random one made in the graph."""
    redis_address: pulumi.Input[str] | None = None
    """The GCS fault tolerance store's address (rediss://host:port), in place of the spec's placeholder."""
    redis_password: pulumi.Input[str] | None = None
    """That store's AUTH token (a secret): the Secret gcsFaultToleranceOptions.redisPassword refers to."""
    head_security_group_ids: Sequence[pulumi.Input[str]] | None = ()
    """Security groups for the Ray head pod (a SecurityGroupPolicy), with the GCS store only."""
    sealed_secrets: Sequence[str] | None = ()
    """Secrets (hfToken, apiKeys, rayAuthToken) an offline plan cannot read (`secure:` values): their content checks
    wait for `pulumi up`."""

    def __post_init__(self) -> None:
        fill_defaults(self)
        check_namespace("namespace", self.namespace, ARGS)
        check_service_name("service_name", self.service_name, ARGS)
        check_environment("environment", self.environment, ARGS)
        check_ready_timeout("ready_timeout_seconds", self.ready_timeout_seconds, ARGS)
        if (self.ray_service_spec is None) == (self.gpu_pools is None):
            both = self.ray_service_spec is not None
            raise ConfigError(
                "ray_service_spec" if both else "gpu_pools",
                "given with gpu_pools" if both else None,
                "one of gpu_pools (the component renders the RayService) and ray_service_spec (one rendered already)",
                ARGS,
            )
        if self.gpu_pools is not None:
            self._render()
        if not isinstance(self.model_id, str) or not self.model_id:
            raise ConfigError("model_id", self.model_id, "the served model's id, a non-empty string", ARGS)
        groups = (
            self.ray_service_spec.get("rayClusterConfig", {}).get("workerGroupSpecs")
            if isinstance(self.ray_service_spec, Mapping)
            else None
        )
        if not groups:
            raise ConfigError(
                "ray_service_spec",
                self.ray_service_spec,
                "a RayService spec with rayClusterConfig.workerGroupSpecs "
                "(ray_llm_eks.domain.render.ray_service.ray_service_spec)",
                ARGS,
            )
        known = api_keys.SHIPPED_MODULES
        if self.ingress_modules is not None and not set(self.ingress_modules) <= set(known):
            raise ConfigError("ingress_modules", self.ingress_modules, f"modules of {list(known)}", ARGS)
        if (self.redis_address is None) != (self.redis_password is None):
            raise ConfigError(
                "redis_password" if self.redis_password is None else "redis_address",
                None,
                "set together with redis_address / redis_password (the GCS store's address and AUTH token)",
                ARGS,
            )

    def _render(self) -> None:
        """The RayService of the typed inputs, through the checks a stack's keys pass (adapters.stack
        service_settings): its spec, the served model's id and the modules its pods import."""
        if not isinstance(self.region, str) or not self.region:
            raise ConfigError("region", self.region, "the cluster's AWS region (e.g. us-east-1), with gpu_pools", ARGS)
        shipped = serve_config.serve_config_names()
        if self.serve_config is not None and self.serve_config not in shipped:  # no stack file for a path to be beside
            allowed = f"a shipped serving application, one of {yaml_text(shipped)}"
            raise ConfigError("serve_config", self.serve_config, allowed, ARGS)
        values = {key: getattr(self, field) for field, key in STACK_KEYS.items()}
        values["gpuPools"] = {pool.name: pool.stack_value() for pool in self.gpu_pools}
        # As `pulumi config` hands values over: text as is, the rest as JSON.
        given = {key: value for key, value in values.items() if value is not None}
        keys = {f"{PROJECT}:{key}": v if isinstance(v, str) else json.dumps(v) for key, v in given.items()}
        try:
            settings = stack.service_settings(pulumi.get_stack(), {"aws:region": self.region, **keys})
        except ConfigError as err:
            if err.file is not None:  # a serve file's line names that file
                raise
            # The rule may name other keys of the same values (`set image and rayVersion together`): by their fields.
            fields = re.compile(rf"\b({'|'.join(FIELD_OF_KEY)})\b")
            allowed = fields.sub(lambda m: FIELD_OF_KEY[m.group(1)], err.allowed)
            raise ConfigError(args_path(err.key), err.value, allowed, ARGS) from None
        object.__setattr__(self, "ray_service_spec", ray_service_spec(settings))
        object.__setattr__(self, "model_id", settings.serving.serve_document.model_id)
        object.__setattr__(self, "ingress_modules", api_keys.SHIPPED_MODULES)


def args_path(stack_key: str) -> str:
    """The Args' name of what a stack key's line refuses (`ray-llm-eks:gpuPools.prefill.instanceType` ->
    `gpu_pools.prefill.instance_type`): the component's caller gave fields, not keys. A pool's name stays as given."""
    head, *rest = stack_key.removeprefix(f"{PROJECT}:").split(".")
    if len(rest) > 1:
        rest[-1] = {key: field for field, key in POOL_KEYS.items()}.get(rest[-1], rest[-1])
    return ".".join([FIELD_OF_KEY.get(head, head), *rest])


def ready_annotations(timeout_seconds: int, wait_for_ready: bool) -> dict[str, str]:
    """What pulumi-kubernetes waits for on the RayService (its await annotations)."""
    if not wait_for_ready:
        return {"pulumi.com/skipAwait": "true"}  # stack setting waitForReady: false (CI deploys)
    return {
        "pulumi.com/waitFor": "condition=Ready",
        # First start: image pull, weight download, engine start (docs/operations.md: what a start costs).
        "pulumi.com/timeoutSeconds": str(timeout_seconds),
    }


class LlmService(pulumi.ComponentResource):
    """Finishes only when the RayService reports Ready, i.e. when the endpoint really serves (unless
    wait_for_ready is false). The RayService is the Args' spec as given."""

    TYPE = "ray-llm-eks:llm_service:LlmService"  # the shipped program's resources keep their URNs

    base_url: str
    """The OpenAI-compatible endpoint inside the cluster."""
    port_forward: str
    """The kubectl command that forwards the serve port to localhost."""
    dashboard_port_forward: str
    """The kubectl command that forwards the Ray dashboard to localhost."""
    dashboard_token: str
    """The kubectl command that prints Ray's token, which the dashboard asks for (empty: no token mode)."""
    curl_example: str
    """A curl request to the forwarded endpoint."""
    openai_example: str
    """A Python program that calls the forwarded endpoint with the openai client."""
    api_key: pulumi.Output[str] | None
    """The key generated where the key check is on and no api_keys are given (a secret); None otherwise."""

    def __init__(self, name: str, args: LlmServiceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        ns, svc = args.namespace, args.service_name
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=ns, labels=pod_security.labels(pod_security.SERVING)),
            opts=child,
        )
        waits_for = [namespace]
        sealed = set(args.sealed_secrets)
        self.api_key = None

        def checked(value: pulumi.Input[str], check, key: str) -> pulumi.Output[str]:
            """`value` through its content check (ray_llm_eks/domain/security/secret_content.py), unless sealed: a
            `secure:` value offline, whose check waits for `pulumi up` (the plan's deferred line says so)."""
            value = pulumi.Output.from_input(value)
            return value if key in sealed else value.apply(check)

        if args.network_policies:  # before any Ray pod exists
            waits_for.append(
                NamespaceNetworkPolicies(
                    f"{name}-network-policies",
                    [dict(doc) for doc in args.network_policies],
                    pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
                )
            )
        if args.hf_token is not None:
            waits_for.append(
                k8s.core.v1.Secret(
                    f"{name}-hf-token",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=HF_TOKEN_SECRET, namespace=namespace.metadata.name),
                    type="Opaque",
                    string_data={
                        HF_TOKEN_KEY: pulumi.Output.secret(checked(args.hf_token, secret_content.hf_token, "hfToken"))
                    },
                    opts=child,
                )
            )
        if args.api_key_check or api_keys.mounts_shipped_code(dict(args.ray_service_spec)):
            # The shipped code (ray_llm_eks/domain/serving/api_keys.py): the key-checking ingress's, the head's start
            # with a GCS store (ray_llm_eks/domain/cluster/gcs_ft.py head_start).
            waits_for.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-api-key-ingress",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=api_keys.CONFIG_MAP_NAME, namespace=namespace.metadata.name
                    ),
                    data=api_keys.ingress_sources(args.ingress_modules or api_keys.SHIPPED_MODULES),
                    opts=child,
                )
            )
        if args.api_key_check:
            if args.api_keys is None:
                # No key given (a plain `pulumi up`): one made in the graph, a secret in the state (pulumi-random
                # stores `result` as one) and in the stack output; 48 letters and digits, nothing to check, and
                # its own file (the ingress reads one key per line).
                generated = random.RandomPassword(f"{name}-api-key", length=48, special=False, opts=child)
                self.api_key = key_file = pulumi.Output.secret(generated.result)
            else:
                key_file = checked(args.api_keys, api_keys.key_file_content, "apiKeys")
            waits_for.append(
                k8s.core.v1.Secret(
                    f"{name}-api-keys",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=api_keys.SECRET_NAME, namespace=namespace.metadata.name),
                    type="Opaque",
                    string_data={api_keys.KEYS_FILE: pulumi.Output.secret(key_file)},
                    opts=child,
                )
            )

        if auth_secret := auth_secret_name(args.ray_service_spec):
            # Ray's token (ray_llm_eks/domain/security/ray_auth.py): random, a Pulumi secret end to end; KubeRay puts
            # it into every Ray container and sends it on its own dashboard calls.
            if args.ray_auth_token is not None:
                token_value = checked(args.ray_auth_token, ray_auth.check_token, "rayAuthToken")
            else:
                token = random.RandomPassword(f"{name}-ray-auth-token", length=48, special=False, opts=child)
                token_value = token.result
            waits_for.append(
                k8s.core.v1.Secret(
                    f"{name}-ray-auth-token",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=auth_secret, namespace=namespace.metadata.name),
                    type="Opaque",
                    string_data={ray_auth.SECRET_KEY: pulumi.Output.secret(token_value)},
                    opts=child,
                )
            )

        for account in named_service_accounts(args.ray_service_spec):  # before the pods that run under them
            waits_for.append(
                k8s.core.v1.ServiceAccount(
                    f"{name}-{account}",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=account, namespace=namespace.metadata.name),
                    automount_service_account_token=False,  # its pods call AWS (Pod Identity), not Kubernetes
                    opts=child,
                )
            )

        spec = dict(args.ray_service_spec)  # the store's address is a placeholder until AWS names it
        deployed_spec: pulumi.Input[dict] = spec
        if args.redis_address is not None:
            # The AUTH token for the head (gcsFaultToleranceOptions.redisPassword), and the head pod's own
            # security group, the only one the store admits (ray_llm_eks/components/gcs_store.py says why).
            waits_for.append(
                k8s.core.v1.Secret(
                    f"{name}-gcs-redis-auth",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=gcs_ft.REDIS_SECRET, namespace=namespace.metadata.name),
                    type="Opaque",
                    string_data={gcs_ft.REDIS_SECRET_KEY: pulumi.Output.secret(args.redis_password)},
                    opts=child,
                )
            )
            waits_for.append(
                k8s.apiextensions.CustomResource(
                    f"{name}-head-security-groups",
                    api_version="vpcresources.k8s.aws/v1beta1",
                    kind="SecurityGroupPolicy",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name="ray-head", namespace=namespace.metadata.name),
                    spec={
                        "podSelector": {"matchLabels": dict(gcs_ft.HEAD_SELECTOR)},
                        "securityGroups": {"groupIds": list(args.head_security_group_ids)},
                    },
                    opts=child,
                )
            )
            deployed_spec = pulumi.Output.from_input(args.redis_address).apply(
                lambda address: gcs_ft.with_redis_address(spec, address)
            )
        # upgradeStrategy None (ray_llm_eks/domain/cluster/upgrades.py): KubeRay applies no cluster change to a running
        # cluster, so the program replaces the RayService; NewCluster: KubeRay makes the second cluster itself.
        replaces = spec.get("upgradeStrategy", {}).get("type") == "None"
        self.ray_service = k8s.apiextensions.CustomResource(
            f"{name}-rayservice",
            api_version="ray.io/v1",
            kind="RayService",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=svc,
                namespace=ns,
                annotations={
                    **ready_annotations(args.ready_timeout_seconds, args.wait_for_ready),
                    **worker_groups_annotation(spec),
                    # The policy pack allows a RayService without the key check only in a dev environment.
                    ENVIRONMENT_ANNOTATION: args.environment,
                    # The KubeRay operator writes the whole RayService back when it adds its finalizer
                    # (rayservice_controller.go, r.Update), so it co-owns our fields; our spec wins.
                    "pulumi.com/patchForce": "true",
                },
            ),
            spec=deployed_spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=waits_for,
                # Cluster changes need the GPUs of the running cluster: delete it first, then create.
                # Worker bounds too: KubeRay never passes them to a running cluster
                # (ray_llm_eks/domain/render/ray_service.py).
                replace_on_changes=replacement_paths(spec) if replaces else None,
                delete_before_replace=replaces,
            ),
        )

        self.base_url = f"http://{svc}-serve-svc.{ns}.svc.cluster.local:{SERVE_PORT}/v1"
        self.port_forward = f"kubectl -n {ns} port-forward svc/{svc}-serve-svc {SERVE_PORT}:{SERVE_PORT}"
        self.dashboard_port_forward = (
            f"kubectl -n {ns} port-forward svc/{svc}-head-svc {HEAD_PORTS['dashboard']}:{HEAD_PORTS['dashboard']}"
        )
        self.dashboard_token = ray_auth.token_command(ns) if auth_secret else ""
        model_id = args.model_id
        self.curl_example = (
            f"curl -s http://localhost:{SERVE_PORT}/v1/chat/completions -H 'Content-Type: application/json' "
            '-H "Authorization: Bearer $OPENAI_API_KEY" '
            f'-d \'{{"model": "{model_id}", "messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 64}}\''
        )
        # The ingress checks the key (ray_llm_eks/domain/serving/api_keys.py): the client sends one of the stack's
        # apiKeys.
        self.openai_example = (
            "import os\n\nfrom openai import OpenAI\n\n"
            f'client = OpenAI(base_url="http://localhost:{SERVE_PORT}/v1", api_key=os.environ["OPENAI_API_KEY"])\n'
            "reply = client.chat.completions.create(\n"
            f'    model="{model_id}", messages=[{{"role": "user", "content": "Hello!"}}], max_tokens=64\n'
            ")\n"
            "print(reply.choices[0].message.content)\n"
        )
        self.register_outputs({"openaiBaseUrl": self.base_url})
