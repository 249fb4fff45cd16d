"""LlmService: the namespace, the Hugging Face token Secret and the RayService that serves the model
behind one OpenAI-compatible endpoint."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.gcs_store import GcsStore
from components.network_policies import NamespaceNetworkPolicies
from domain import api_keys, gcs_ft, secret_content
from domain.facts import ENVIRONMENT_ANNOTATION, HEAD_PORTS, KUBERAY_NAMESPACE, SERVE_PORT
from domain.hardening import HardeningSettings
from domain.network_policies import network_policies
from domain.ray_service import (
    HF_TOKEN_KEY,
    HF_TOKEN_SECRET,
    ray_service_spec,
    replacement_paths,
    worker_groups_annotation,
)
from domain.serve_config import llm_configs_by_role
from domain.settings import ServingSettings, Settings


def ready_annotations(serving: ServingSettings, wait_for_ready: bool) -> dict[str, str]:
    """What pulumi-kubernetes waits for on the RayService (its await annotations)."""
    if not wait_for_ready:
        return {"pulumi.com/skipAwait": "true"}  # stack setting waitForReady: false (CI deploys)
    return {
        "pulumi.com/waitFor": "condition=Ready",
        # First start: image pull, weight download, engine start (docs/operations.md: what a start costs).
        "pulumi.com/timeoutSeconds": str(serving.ready_timeout_seconds),
    }


class LlmService(pulumi.ComponentResource):
    """Finishes only when the RayService reports Ready, i.e. when the endpoint really serves (unless
    the stack sets waitForReady: false). The RayService is domain/ray_service.py's spec as built."""

    def __init__(
        self,
        name: str,
        settings: Settings,
        hf_token: pulumi.Output[str] | None,
        keys: pulumi.Output[str] | None,
        sealed: frozenset[str],
        opts: pulumi.ResourceOptions,
        wait_for_ready: bool = True,
        hardening: HardeningSettings | None = None,
        operator_namespace: str = KUBERAY_NAMESPACE,
        gcs_store: GcsStore | None = None,
        head_security_groups: list[pulumi.Input[str]] | None = None,
    ):
        super().__init__("ray-llm-eks:llm_service:LlmService", name, None, opts)
        serving = settings.serving
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata=k8s.meta.v1.ObjectMetaArgs(name=serving.namespace), opts=child
        )
        waits_for = [namespace]

        def checked(value: pulumi.Output[str], check, key: str) -> pulumi.Output[str]:
            """`value` through its content check (domain/secret_content.py), unless sealed: a `secure:` value
            offline, whose check waits for `pulumi up` (the plan's deferred line says so)."""
            return value if key in sealed else value.apply(check)

        hardening = hardening or HardeningSettings()
        if hardening.network_policies:  # before any Ray pod exists
            waits_for.append(
                NamespaceNetworkPolicies(
                    f"{name}-network-policies",
                    network_policies(serving.namespace, hardening, operator_namespace, serving.observability),
                    pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
                )
            )
        if hf_token is not None:
            waits_for.append(
                k8s.core.v1.Secret(
                    f"{name}-hf-token",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=HF_TOKEN_SECRET, namespace=namespace.metadata.name),
                    type="Opaque",
                    string_data={
                        HF_TOKEN_KEY: pulumi.Output.secret(checked(hf_token, secret_content.hf_token, "hfToken"))
                    },
                    opts=child,
                )
            )
        if settings.hardening.api_key_check:
            # The key-checking ingress (domain/api_keys.py): its code, and the keys as a file.
            waits_for.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-api-key-ingress",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=api_keys.CONFIG_MAP_NAME, namespace=namespace.metadata.name
                    ),
                    data=api_keys.ingress_sources(),
                    opts=child,
                )
            )
            key_file = checked(
                pulumi.Output.from_input(keys if keys is not None else ""), api_keys.key_file_content, "apiKeys"
            )
            waits_for.append(
                k8s.core.v1.Secret(
                    f"{name}-api-keys",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=api_keys.SECRET_NAME, namespace=namespace.metadata.name),
                    type="Opaque",
                    string_data={api_keys.KEYS_FILE: pulumi.Output.secret(key_file)},
                    opts=child,
                )
            )

        if gcs_store is not None:
            # The AUTH token for the head (gcsFaultToleranceOptions.redisPassword), and the head pod's own
            # security group, the only one the store admits (components/gcs_store.py says why).
            waits_for.append(gcs_store.auth_secret(f"{name}-gcs-redis-auth", namespace.metadata.name, child))
            waits_for.append(
                k8s.apiextensions.CustomResource(
                    f"{name}-head-security-groups",
                    api_version="vpcresources.k8s.aws/v1beta1",
                    kind="SecurityGroupPolicy",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name="ray-head", namespace=namespace.metadata.name),
                    spec={
                        "podSelector": {"matchLabels": dict(gcs_ft.HEAD_SELECTOR)},
                        "securityGroups": {"groupIds": head_security_groups or []},
                    },
                    opts=child,
                )
            )
        spec = ray_service_spec(settings)  # the store's address is a placeholder until AWS names it
        deployed_spec = (
            gcs_store.address.apply(lambda address: ray_service_spec(settings, address)) if gcs_store else spec
        )
        # upgradeStrategy None (domain/upgrades.py): KubeRay applies no cluster change to a running cluster,
        # so the program replaces the RayService; NewCluster: KubeRay makes the second cluster itself.
        replaces = settings.upgrade_strategy == "None"
        self.ray_service = k8s.apiextensions.CustomResource(
            f"{name}-rayservice",
            api_version="ray.io/v1",
            kind="RayService",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=serving.service_name,
                namespace=serving.namespace,
                annotations={
                    **ready_annotations(serving, wait_for_ready),
                    **worker_groups_annotation(spec),
                    # The policy pack allows a RayService without the key check only in a dev environment.
                    ENVIRONMENT_ANNOTATION: settings.hardening.environment,
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
                # Worker bounds too: KubeRay never passes them to a running cluster (domain/ray_service.py).
                replace_on_changes=replacement_paths(spec) if replaces else None,
                delete_before_replace=replaces,
            ),
        )

        ns, svc = serving.namespace, serving.service_name
        self.base_url = f"http://{svc}-serve-svc.{ns}.svc.cluster.local:{SERVE_PORT}/v1"
        self.port_forward = f"kubectl -n {ns} port-forward svc/{svc}-serve-svc {SERVE_PORT}:{SERVE_PORT}"
        self.dashboard_port_forward = (
            f"kubectl -n {ns} port-forward svc/{svc}-head-svc {HEAD_PORTS['dashboard']}:{HEAD_PORTS['dashboard']}"
        )
        configs = llm_configs_by_role(serving.serve_document, "rendered")
        model_id = next(iter(configs.values()))["model_loading_config"]["model_id"]
        self.curl_example = (
            f"curl -s http://localhost:{SERVE_PORT}/v1/chat/completions -H 'Content-Type: application/json' "
            '-H "Authorization: Bearer $OPENAI_API_KEY" '
            f'-d \'{{"model": "{model_id}", "messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 64}}\''
        )
        # The ingress checks the key (domain/api_keys.py): the client sends one of the stack's apiKeys.
        self.openai_example = (
            "import os\n\nfrom openai import OpenAI\n\n"
            f'client = OpenAI(base_url="http://localhost:{SERVE_PORT}/v1", api_key=os.environ["OPENAI_API_KEY"])\n'
            "reply = client.chat.completions.create(\n"
            f'    model="{model_id}", messages=[{{"role": "user", "content": "Hello!"}}], max_tokens=64\n'
            ")\n"
            "print(reply.choices[0].message.content)\n"
        )
        self.register_outputs({"openaiBaseUrl": self.base_url})
