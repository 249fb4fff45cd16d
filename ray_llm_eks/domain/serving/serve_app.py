"""The serve document (Ray Serve's ServeDeploySchema, what becomes the RayService's serveConfigV2) as one typed
model: `parse_document` builds it from a serve file's data, the stack's transformations return new documents, and
`document_dict` / `to_yaml` serialize it once. Its LLM configs: ray_llm_eks/domain/serving/llm_config.py.

One application per document, built by Ray Serve LLM's OpenAI app (collocated) or its PD app (or the stack's PD
builders in its place); the parse refuses what Ray would refuse only when the cluster builds the app: another
builder, arguments the builder does not take, a PD app without both sides, an unknown field of Ray's models."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import yaml

from ray_llm_eks.domain.core.errors import NOT_SHOWN, UNSET, did_you_mean, in_serve_config, yaml_text
from ray_llm_eks.domain.core.facts import COLLOCATED_ROLE, PD_ROLES
from ray_llm_eks.domain.serving import routing
from ray_llm_eks.domain.serving.fields import Fields, Json, no_extra, put, to_dict
from ray_llm_eks.domain.serving.llm_config import LlmConfig, RuntimeEnv

PD_IMPORT = "ray.serve.llm:build_pd_openai_app"
COLLOCATED_IMPORT = "ray.serve.llm:build_openai_app"
# Ray's PD app whose decode replicas prefill short prompts themselves (ray_llm_eks/serve_ingress/selective_pd.py): what
# the stack key selectivePd renders in place of PD_IMPORT, never written in a serve file.
SELECTIVE_PD_IMPORT = "selective_pd:build_selective_pd_app"
# Ray's PD app whose decode replicas start afresh after a prefill restart (ray_llm_eks/serve_ingress/prefill_guard.py):
# what a keyed document runs in place of PD_IMPORT (the shipped code is on the pods' path there), never in a serve
# file.
GUARDED_PD_IMPORT = "prefill_guard:build_pd_app"
# Ray's LLM server that sends a stream's first token as soon as it comes (ray_llm_eks/serve_ingress/first_chunk.py):
# the server_cls a keyed collocated app's LLM configs name where their file names none.
FIRST_CHUNK_SERVER = "first_chunk:LLMServer"
PD_IMPORTS = (PD_IMPORT, SELECTIVE_PD_IMPORT, GUARDED_PD_IMPORT)
# The decode config's experimental_configs key selective_pd.py reads the threshold from (local_prefill.py
# THRESHOLD_CONFIG).
LOCAL_PREFILL_BELOW = "local_prefill_below_tokens"
# Fields of Ray 2.58 PDServingArgs and LLMServingArgs we accept (the deprecated, ignored proxy_*
# fields of PDServingArgs are refused: they would silently do nothing).
APP_ARGS = {
    PD_IMPORT: {"prefill_config", "decode_config", "ingress_cls_config", "ingress_deployment_config"},
    COLLOCATED_IMPORT: {"llm_configs", "ingress_cls_config", "ingress_deployment_config"},
}
APP_ARGS[SELECTIVE_PD_IMPORT] = APP_ARGS[GUARDED_PD_IMPORT] = APP_ARGS[PD_IMPORT]  # handed to build_pd_openai_app
PD_ARG_ROLES = {f"{role}_config": role for role in PD_ROLES}  # PDServingArgs' prefill_config, decode_config

_BUILDER = "ray.llm._internal.serve.core.ingress.builder"


def parse_llm_config(raw: Any, file: str, role: str) -> LlmConfig:
    """One role's LLM config; its request router is checked as Ray would check it on the cluster first (routing.py
    names what is wrong with it better than a list of fields)."""
    deployment = raw.get("deployment_config") if isinstance(raw, Mapping) else None
    router = deployment.get("request_router_config") if isinstance(deployment, Mapping) else None
    if router is not None:
        routing.check_request_router_config(f"{file}: {role} deployment_config.request_router_config", router)
    return LlmConfig.parse(raw, file, role)


@dataclass(frozen=True)
class IngressClsConfig(Fields):
    """The ingress deployment's class (the stack's key-checking one, ray_llm_eks/domain/serving/api_keys.py)."""

    RAY_MODEL: ClassVar[str] = f"{_BUILDER}:IngressClsConfig"

    ingress_cls: str | None = None
    ingress_extra_kwargs: Mapping[str, Json] | None = None


@dataclass(frozen=True)
class OpenAiAppArgs(Fields):
    """build_openai_app's arguments (Ray's LLMServingArgs): one collocated engine per replica."""

    RAY_MODEL: ClassVar[str] = f"{_BUILDER}:LLMServingArgs"
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType({"ingress_cls_config": IngressClsConfig})

    llm_configs: tuple[LlmConfig, ...] = ()
    ingress_cls_config: IngressClsConfig | None = None
    ingress_deployment_config: Mapping[str, Json] | None = None

    @classmethod
    def parse(cls, raw: Any, file: str, path: str) -> OpenAiAppArgs:
        configs = raw.get("llm_configs") or []
        if not isinstance(configs, list | tuple) or len(configs) != 1:
            raise in_serve_config(file, "args.llm_configs", NOT_SHOWN, "exactly one entry (one model per stack)")
        parsed = tuple(parse_llm_config(config, file, COLLOCATED_ROLE) for config in configs)
        return super().parse({**raw, "llm_configs": parsed}, file, path)


@dataclass(frozen=True)
class PdAppArgs(Fields):
    """build_pd_openai_app's arguments (Ray's PDServingArgs), for the stack's PD builders too."""

    RAY_MODEL: ClassVar[str] = "ray.llm._internal.serve.serving_patterns.prefill_decode.builder:PDServingArgs"
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType({"ingress_cls_config": IngressClsConfig})

    prefill_config: LlmConfig | None = None
    decode_config: LlmConfig | None = None
    ingress_cls_config: IngressClsConfig | None = None
    ingress_deployment_config: Mapping[str, Json] | None = None

    @classmethod
    def parse(cls, raw: Any, file: str, path: str) -> PdAppArgs:
        for key in PD_ARG_ROLES:
            if key not in raw:
                raise in_serve_config(file, f"args.{key}", UNSET, "required by build_pd_openai_app")
        sides = {key: parse_llm_config(raw[key], file, role) for key, role in PD_ARG_ROLES.items()}
        return super().parse({**raw, **sides}, file, path)


AppArgs = OpenAiAppArgs | PdAppArgs


@dataclass(frozen=True)
class ServeApplication(Fields):
    """The one application of the document (Ray's ServeApplicationSchema)."""

    RAY_MODEL: ClassVar[str] = "ray.serve.schema:ServeApplicationSchema"
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {"host", "port", "deployments", "autoscaling_policy", "logging_config", "external_scaler_enabled"}
    )
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType({"runtime_env": RuntimeEnv})

    name: str | None = None
    route_prefix: str | None = None
    import_path: str = ""
    args: AppArgs | None = None
    runtime_env: RuntimeEnv | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)

    @classmethod
    def parse(cls, raw: Any, file: str, path: str) -> ServeApplication:
        if not isinstance(raw, Mapping) or raw.get("import_path") not in APP_ARGS:
            value = raw.get("import_path") if isinstance(raw, Mapping) else raw
            raise in_serve_config(file, "import_path", value, f"one of {yaml_text(sorted(APP_ARGS))}")
        import_path = raw["import_path"]
        args = raw.get("args") or {}
        if not isinstance(args, Mapping):
            raise in_serve_config(
                file, "args", args, f"a mapping with fields {yaml_text(sorted(APP_ARGS[import_path]))}"
            )
        unknown = sorted(set(args) - APP_ARGS[import_path])
        if unknown:
            raise in_serve_config(
                file,
                f"args.{unknown[0]}",
                NOT_SHOWN,
                f"not an argument of {import_path};{did_you_mean(unknown[0], APP_ARGS[import_path])} "
                f"arguments: {yaml_text(sorted(APP_ARGS[import_path]))}",
            )
        kind = PdAppArgs if import_path in PD_IMPORTS else OpenAiAppArgs
        for entry in raw.get("deployments") or []:  # the application's per-deployment overrides
            if isinstance(entry, Mapping) and "request_router_config" in entry:
                name = f"{file}: deployments[{entry.get('name')}].request_router_config"
                routing.check_request_router_config(name, entry["request_router_config"])
        parsed = kind.parse(args, file, "args")
        return super().parse({**raw, "args": parsed} if "args" in raw else raw, file, path)

    @property
    def app_args(self) -> AppArgs:
        return self.args or (PdAppArgs() if self.pd else OpenAiAppArgs())

    @property
    def pd(self) -> bool:
        return self.import_path in PD_IMPORTS

    @property
    def roles(self) -> Mapping[str, LlmConfig]:
        """The LLM configs, keyed by the pool role each one runs on (prefill then decode, or collocated)."""
        args = self.app_args
        if isinstance(args, PdAppArgs):
            return MappingProxyType({role: getattr(args, key) for key, role in PD_ARG_ROLES.items()})
        return MappingProxyType({COLLOCATED_ROLE: args.llm_configs[0]})

    def with_role(self, role: str, config: LlmConfig) -> ServeApplication:
        """The application with `role`'s LLM config replaced (in its place)."""
        args = self.app_args
        if isinstance(args, PdAppArgs):
            return put(self, args=put(args, **{f"{role}_config": config}))
        return put(self, args=put(args, llm_configs=(config,)))


@dataclass(frozen=True)
class HttpOptions(Fields):
    """Where Serve's proxy listens (Ray's HTTPOptionsSchema)."""

    RAY_MODEL: ClassVar[str] = "ray.serve.schema:HTTPOptionsSchema"
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {
            "root_path",
            "request_timeout_s",
            "keep_alive_timeout_s",
            "ssl_keyfile",
            "ssl_certfile",
            "ssl_keyfile_password",
            "ssl_ca_certs",
        }
    )

    host: str | None = None
    port: int | None = None
    extra: Mapping[str, Json] = field(default_factory=no_extra)


@dataclass(frozen=True)
class ServeDocument(Fields):
    """A Ray Serve config (Ray's ServeDeploySchema) of one application."""

    RAY_MODEL: ClassVar[str] = "ray.serve.schema:ServeDeploySchema"
    PASS_THROUGH: ClassVar[frozenset[str] | None] = frozenset(
        {"proxy_location", "grpc_options", "controller_options", "logging_config", "target_capacity"}
    )
    NESTED: ClassVar[Mapping[str, type[Fields]]] = MappingProxyType({"http_options": HttpOptions})

    http_options: HttpOptions | None = None
    applications: tuple[ServeApplication, ...] = ()
    extra: Mapping[str, Json] = field(default_factory=no_extra)

    @classmethod
    def parse(cls, raw: Any, file: str, path: str = "") -> ServeDocument:
        apps = raw.get("applications") if isinstance(raw, Mapping) else None
        if not isinstance(apps, list | tuple) or len(apps) != 1:
            raise in_serve_config(file, "applications", NOT_SHOWN, "exactly one application")
        parsed = tuple(ServeApplication.parse(app, file, "") for app in apps)
        return super().parse({**raw, "applications": parsed}, file, path)

    @property
    def application(self) -> ServeApplication:
        return self.applications[0]

    @property
    def roles(self) -> Mapping[str, LlmConfig]:
        return self.application.roles

    @property
    def model_id(self) -> str:
        """The model's id as clients name it: every role serves the same model (the serve-config rules check it)."""
        return next(iter(self.roles.values())).model.model_id or ""

    @property
    def pd(self) -> bool:
        return self.application.pd

    @property
    def selective_pd(self) -> bool:
        return self.application.import_path == SELECTIVE_PD_IMPORT

    @property
    def local_prefill_below(self) -> int | None:
        """selective PD's threshold as the decode config carries it (None: the app always splits)."""
        decode = self.roles.get("decode")
        return None if decode is None else (decode.experimental_configs or {}).get(LOCAL_PREFILL_BELOW)

    def with_application(self, app: ServeApplication) -> ServeDocument:
        return put(self, applications=(app,))

    def map_roles(self, change: Callable[[str, LlmConfig], LlmConfig]) -> ServeDocument:
        """The document with each role's LLM config replaced by `change(role, config)`."""
        app = self.application
        for role, config in self.roles.items():
            app = app.with_role(role, change(role, config))
        return self.with_application(app)


def parse_document(raw: Any, file: str) -> ServeDocument:
    """A serve document's data (a serve file as YAML loads it, or a rendered serveConfigV2) as the typed model: the
    one way in. `file` names it in the line that refuses it."""
    return ServeDocument.parse(raw, file)


def document_dict(doc: ServeDocument) -> dict:
    """The plain data of the document, keys in its order: what becomes serveConfigV2."""
    return to_dict(doc)


def to_yaml(doc: ServeDocument) -> str:
    return yaml.safe_dump(document_dict(doc), sort_keys=False, width=120)
