"""The serving section of the stack: the image and the versions it holds, the model and its overrides, the
serve config rendered for the pools and fitted to them, the charts the serving path installs. One step of
ray_llm_eks/domain/loading/config.py's load_settings, after the pools are resolved."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ray_llm_eks.domain.core.errors import UNSET, ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import GPU_ROLES
from ray_llm_eks.domain.core.raw_config import RawConfig
from ray_llm_eks.domain.fit import model_fit, roles, scaling
from ray_llm_eks.domain.platform import field_checks, image_ref, versions
from ray_llm_eks.domain.platform.aws_facts import BotocoreFacts, InstanceTable
from ray_llm_eks.domain.security import ray_auth
from ray_llm_eks.domain.serving import api_keys, model_table, routing, serve_config
from ray_llm_eks.domain.serving.role_view import replica_bounds
from ray_llm_eks.domain.stack.settings import GpuPoolSettings, ServingSettings
from ray_llm_eks.domain.telemetry.observability import ObservabilitySettings


def _image(raw: RawConfig, region: str, facts: BotocoreFacts) -> tuple[str, dict[str, str]]:
    """Image and the versions it holds (component -> version: Ray only for your own image, whose
    engine_kwargs are then checked by vLLM only). The AWS Ray LLM DLC by default, its versions from a table."""
    image, ray_version = raw.text("image"), raw.text("rayVersion")
    if image is not None or ray_version is not None:
        if image is None or ray_version is None:
            missing = "image" if image is None else "rayVersion"
            raise ConfigError(
                missing, UNSET, "set image and rayVersion together: rayVersion must equal the image's Ray"
            )
        pinned = re.fullmatch(image_ref.PINNED_REFERENCE, image)
        if not pinned or not (pinned.group(1) or pinned.group(2)) or image.endswith(":latest"):
            raise ConfigError(
                "image", image, "an image pinned to an exact tag, a sha256 digest or both (tag@sha256:..., not :latest)"
            )
        if not re.fullmatch(r"\d+\.\d+\.\d+", ray_version):
            raise ConfigError("rayVersion", ray_version, "an exact Ray version such as 2.58.0")
        ray_auth.check_ray_version("rayVersion", ray_version)
        return image, {"ray": ray_version}
    given = raw.text("dlcImageTag")
    # `<tag>@sha256:<digest>`: the digest `make pin` found for the tag (ray_llm_eks/domain/platform/pins.py).
    tag, _, digest = given.partition("@")
    if tag not in versions.DLC_IMAGES or (digest and not re.fullmatch(image_ref.IMAGE_DIGEST, f"@{digest}")):
        raise ConfigError(
            "dlcImageTag",
            given,
            f"a DLC tag whose Ray version we know: {yaml_text(sorted(versions.DLC_IMAGES))}, "
            "with the digest `make pin` found for it or without (<tag>@sha256:<64 hex>)",
        )
    account = versions.DLC_ACCOUNTS.get(region)
    if account is None:
        raise ConfigError(
            "aws:region",
            region,
            f"a region with an AWS Deep Learning Containers registry {yaml_text(sorted(versions.DLC_ACCOUNTS))}, "
            "or set image and rayVersion to an image you host",
        )
    dlc = versions.DLC_IMAGES[tag]
    registry = f"{account}.dkr.ecr.{region}.{facts.partition_dns_suffix(region)}"
    return f"{registry}/{versions.DLC_REPOSITORY}:{given}", dlc.components()


REPLICAS_SHAPE = f"a mapping of roles {yaml_text(GPU_ROLES)} to whole numbers of replicas"


def _serve_overrides(raw: RawConfig) -> serve_config.ServeOverrides:
    model_id, model_source = raw.text("modelId"), raw.text("modelSource")
    for key, value in (("modelId", model_id), ("modelSource", model_source)):
        if value is not None and not re.fullmatch(r"[\w][\w./:-]*", value):
            raise ConfigError(key, value, _model_reference_refusal(key, value))
    if model_source is not None and "://" in model_source:
        _s3_uri("modelSource", model_source)
    max_len = raw.integer("maxModelLen")
    if max_len is not None and not 16 <= max_len <= 10_000_000:
        raise ConfigError("maxModelLen", max_len, "a context length in tokens, 16 or more")
    replicas = raw.mapping("replicas", REPLICAS_SHAPE) or {}
    for role, count in replicas.items():
        if role not in GPU_ROLES:
            raise ConfigError(f"replicas.{role}", count, REPLICAS_SHAPE)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"replicas.{role}", count, "a whole number of replicas, 1 or more")
    autoscaling = scaling.load(raw)
    for role in autoscaling:
        if role not in GPU_ROLES:
            raise ConfigError(f"autoscaling.{role}", autoscaling[role], f"a pool role from {yaml_text(GPU_ROLES)}")
    kv_buffer_device = raw.text("kvBufferDevice")
    if kv_buffer_device not in serve_config.KV_BUFFER_DEVICES:
        raise ConfigError("kvBufferDevice", kv_buffer_device, f"one of {yaml_text(serve_config.KV_BUFFER_DEVICES)}")
    return serve_config.ServeOverrides(
        model_id, model_source, max_len, replicas, autoscaling, kv_buffer_device, _selective_pd(raw.text("selectivePd"))
    )


# A path of the machine the stack is written on: a drive letter, a backslash, a home or relative path.
_LOCAL_PATH = re.compile(r"[A-Za-z]:[\\/].*|.*\\.*|~.*|\.{1,2}/.*")


def _model_reference_refusal(key: str, value: str) -> str:
    """What a modelId or modelSource allows, said for the slip it holds."""
    hub = "a Hugging Face repo id such as Qwen/Qwen3.5-9B"
    if _LOCAL_PATH.fullmatch(value) or value.startswith("/"):
        return (
            f"{hub}, or s3://<bucket>/<prefix> of a copy in the stack's region: a path on this machine is not on the "
            "GPU nodes (upload the weights: aws s3 sync <dir> s3://<bucket>/<prefix>)"
        )
    if re.search(r"\s", value):
        return f"{hub} (no spaces)"
    return f"{hub} (letters, digits and . _ - / :, starting with a letter or digit)"


def _selective_pd(value: str) -> int | None:
    """selectivePd: `off` (None), or the prompt length in tokens below which decode prefills itself."""
    if value == "off":
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,7}", value):
        raise ConfigError("selectivePd", value, "off, or a prompt length in tokens (a whole number, 1 or more)")
    return int(value)


# S3 bucket naming rules (3-63 of a-z 0-9 . -, starting and ending with a letter or digit).
_S3_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<prefix>[^\s]*))?")


def _s3_uri(key: str, uri: str) -> str:
    """Weights mirrored to S3: Ray Serve LLM 2.58 downloads a `s3://` model_source as a bucket mirror
    (vllm_models.py from_llm_config: CloudMirrorConfig); the nodes get read access to that prefix."""
    if not _S3_URI.fullmatch(uri):
        raise ConfigError(key, uri, "a Hugging Face repo id (org/name) or s3://<bucket>/<prefix> of the weights")
    return uri


def serving_settings(
    raw: RawConfig,
    region: str,
    pools: Mapping[str, GpuPoolSettings],
    facts: BotocoreFacts,
    obs: ObservabilitySettings,
    instance_prices: Mapping[str, float],
    table: InstanceTable,
    own: serve_config.OwnServeFile | None = None,
) -> tuple[ServingSettings, dict[str, GpuPoolSettings]]:
    """The serving section, and the GPU pools with their node bounds reconciled with its replicas.
    `instance_prices`: on-demand $/h by instance type in the stack's region (a refusal names the cheapest type
    that fits); `table`: the instance types the stack plans with; `own`: the serve file of the user's that
    serveConfig names (the adapter reads it beside the stack file)."""
    image, held = _image(raw, region, facts)
    ray_version, vllm_version = held["ray"], held.get("vllm")
    name = raw.text("serveConfig")
    own_spec = model_table.load(raw)
    model_facts = lambda model_id, source: model_table.model_spec(model_id, source, own_spec)  # noqa: E731
    if serve_config.is_own_file(name) and own is None:
        raise ConfigError("serveConfig", name, f"{serve_config.SERVE_CONFIG_ALLOWED}: not read here")
    overrides = _serve_overrides(raw)
    doc = serve_config.overridden(name, overrides, {p.app_role for p in pools.values()}, vllm_version, own)
    # Node bounds of autoscaling roles follow their replicas (ray_llm_eks/domain/fit/scaling.py), or must agree with
    # them; the render pins each role to its pools as reconciled.
    pools = scaling.reconcile_pools(pools, {role: replica_bounds(role, c) for role, c in doc.roles.items()})
    doc = serve_config.render(doc, name, overrides, roles.role_shapes(pools), model_facts)
    doc = routing.load(raw, doc, name, model_facts)
    api_keys.check_no_own_ingress(doc, serve_config.where_of(name))
    efa_roles = {p.app_role for p in pools.values() if p.efa}
    # max_num_seqs derived where the fit renders it; every pool of a role must fit the role's engine.
    pool_types = [(p.app_role, p.nodes.instance_type) for p in pools.values()]
    seqs = model_fit.parse_max_num_seqs(raw.text("maxNumSeqs"))
    fitted = model_fit.fit_serving(doc, pool_types, efa_roles, own_spec, seqs, instance_prices, table)

    sources = {role: config.model.source for role, config in fitted.document.roles.items()}
    weights_s3 = tuple(
        sorted({_s3_uri(f"serveConfig {role} model_source", u) for role, u in sources.items() if "://" in u})
    )

    service_name = field_checks.check_service_name("serviceName", raw.text("serviceName"))
    namespace = field_checks.check_namespace("namespace", raw.text("namespace"))
    timeout = field_checks.check_ready_timeout("serviceReadyTimeoutSeconds", raw.integer("serviceReadyTimeoutSeconds"))
    efa_registry = facts.eks_addon_registry(region)
    if efa_registry is None and any(p.efa for p in pools.values()):
        raise ConfigError(
            "aws:region",
            region,
            "a region with an Amazon EKS add-on image registry "
            "(ray_llm_eks/domain/platform/aws_facts.py EKS_ADDON_REGISTRY_ACCOUNTS): the "
            "EFA device plugin image is pulled from there",
        )
    serving = ServingSettings(
        observability=obs,
        serve_document=fitted.document,
        fit=fitted.lines,
        max_num_seqs_derived=frozenset(fitted.derived),
        model_spec=own_spec,
        namespace=namespace,
        service_name=service_name,
        image=image,
        ray_version=ray_version,
        kuberay=field_checks.chart_pin(raw, "kuberayVersion", versions.KUBERAY_CHART),
        nvidia_plugin=field_checks.chart_pin(raw, "nvidiaDevicePluginVersion", versions.NVIDIA_PLUGIN_CHART),
        efa_plugin=field_checks.chart_pin(raw, "efaDevicePluginVersion", versions.EFA_PLUGIN_CHART),
        cluster_autoscaler=field_checks.chart_pin(raw, "clusterAutoscalerVersion", versions.CLUSTER_AUTOSCALER_CHART),
        lb_controller=field_checks.chart_pin(raw, "loadBalancerControllerVersion", versions.LB_CONTROLLER_CHART),
        privileged_workers=raw.boolean("privilegedWorkers"),
        ready_timeout_seconds=timeout,
        weights_s3_uris=weights_s3,
        efa_plugin_image=f"{efa_registry}/{versions.EFA_PLUGIN_IMAGE_REPOSITORY}" if efa_registry else None,
        serve_config=name,
        versions=held,
    )
    return serving, pools
