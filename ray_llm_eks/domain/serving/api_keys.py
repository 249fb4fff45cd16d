"""The API key check of the serving endpoint, wired into the RayService (ray_llm_eks/domain/render/ray_service.py, the
one builder of the spec): Ray Serve LLM's ingress is replaced by ray_llm_eks/serve_ingress/api_key_ingress.py
(`ingress_cls_config`), whose code reaches every Ray pod as a ConfigMap and whose keys come from a
Kubernetes Secret mounted as a file (rotation without restarts: ray_llm_eks/serve_ingress/api_keys.py)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TypeVar

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.domain.core.errors import NOT_SHOWN, ConfigError, in_serve_config
from ray_llm_eks.domain.core.facts import KEY_CHECKED_INGRESS
from ray_llm_eks.domain.serving.fields import ensure, put
from ray_llm_eks.domain.serving.llm_config import LlmConfig
from ray_llm_eks.domain.serving.serve_app import (
    COLLOCATED_IMPORT,
    FIRST_CHUNK_SERVER,
    GUARDED_PD_IMPORT,
    PD_IMPORT,
    IngressClsConfig,
    ServeApplication,
    ServeDocument,
)

INGRESS_CLS = KEY_CHECKED_INGRESS
SOURCES_DIR = packaged.ROOT / "serve_ingress"
# Flat modules on the pods' PYTHONPATH; ray_start.py is the head's start with a GCS store (gcs_ft.head_start), the
# prefill guard the PD apps' decode servers (serve_app.GUARDED_PD_IMPORT, selective_pd.py), first_chunk.py every LLM
# server's streaming (serve_app.FIRST_CHUNK_SERVER and the decode servers), selective PD's where the app runs it.
# All of them whatever the app: a pod sees a changed ConfigMap only at kubelet's next sync, so a serve config change
# (selectivePd on or off) must not need a file the pods have not mounted, and the code's digest (with_code_digest)
# must not change with the serve config.
SHIPPED_MODULES = (
    "api_keys.py",
    "api_key_ingress.py",
    "worker_setup.py",
    "ray_start.py",
    "prefill_peers.py",
    "prefill_guard.py",
    "stream_chunks.py",
    "first_chunk.py",
    "local_prefill.py",
    "selective_pd.py",
)
# What ray.init makes of runtime_env `worker_process_setup_hook: "module.function"` (Ray 2.58
# ray/_private/runtime_env/setup_hook.py export_setup_func_module); a Serve application's runtime_env is not
# converted so, hence the env var itself (ray/_private/ray_constants.py WORKER_PROCESS_SETUP_HOOK_ENV_VAR, read
# by ray/_private/workers/default_worker.py before the worker runs any task or actor).
WORKER_SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
# ray_llm_eks/serve_ingress/worker_setup.py: why it must run first
WORKER_SETUP_HOOK = "worker_setup.configure_logging_first"
MODULE_DIR = "/opt/ray-llm-eks/python"
KEYS_DIR = "/etc/ray-llm-eks/api-keys"
KEYS_FILE = "keys"  # the Secret's key: one API key per line
KEYS_FILE_ENV = "RAY_LLM_EKS_API_KEYS_FILE"  # read by ray_llm_eks/serve_ingress/api_keys.py KeyRing
MAX_BODY_ENV = "RAY_LLM_EKS_MAX_REQUEST_BYTES"  # read by ray_llm_eks/serve_ingress/api_keys.py secure
SECRET_NAME = "api-keys"
CONFIG_MAP_NAME = "api-key-ingress"
CODE_ANNOTATION = "ray-llm-eks/shipped-code"  # on the Ray pods that mount it: with_code_digest
MIN_KEY_LENGTH = 16
# What carries a runtime_env of its own: the application, and each LLM config.
H = TypeVar("H", ServeApplication, LlmConfig)


def ingress_sources(modules: Sequence[str] = SHIPPED_MODULES) -> dict[str, str]:
    """The ConfigMap's data: each of `modules` as it is in ray_llm_eks/serve_ingress/."""
    return {name: packaged.read_text(SOURCES_DIR / name) for name in modules}


def check_no_own_ingress(document: ServeDocument, where: str) -> None:
    """The stack sets the ingress class itself; a serve file that sets one would lose the key check."""
    if "ingress_cls_config" in document.application.app_args:
        raise in_serve_config(
            where,
            "args.ingress_cls_config",
            NOT_SHOWN,
            "left out: the stack sets it (the API key check, ray_llm_eks/domain/serving/api_keys.py)",
        )


def with_key_check(document: ServeDocument, max_request_bytes: int) -> ServeDocument:
    """The serve document with every application behind the key-checking ingress, whose requests may carry
    bodies of `max_request_bytes` at most. Ray expands `${PYTHONPATH}` in runtime_env env_vars from the raylet's
    environment (Ray 2.58 ray/_private/utils.py update_envs), so the image's own PYTHONPATH, whatever it is, is
    kept."""
    return on_this_machine(document, MODULE_DIR, f"{KEYS_DIR}/{KEYS_FILE}", max_request_bytes)


def on_this_machine(
    document: ServeDocument, module_dir: str, keys_file: str, max_request_bytes: int | None = None
) -> ServeDocument:
    """`with_key_check` with the ingress code in `module_dir` and the keys in `keys_file` instead of
    the pods' mounts: what a rehearsal on this machine serves. A document that is already keyed
    only has its two paths moved (its body limit kept, unless given)."""
    app = document.application
    app = put(app, args=put(app.app_args, ingress_cls_config=IngressClsConfig.of(ingress_cls=INGRESS_CLS)))
    if app.import_path == PD_IMPORT:  # decode starts afresh after a prefill restart
        app = put(app, import_path=GUARDED_PD_IMPORT)
    limit = {} if max_request_bytes is None else {MAX_BODY_ENV: str(max_request_bytes)}
    app = _run_shipped_code(app, module_dir, **{KEYS_FILE_ENV: keys_file, **limit})
    first_chunk_now = app.import_path == COLLOCATED_IMPORT  # the PD apps' decode servers have it already

    def shipped(_role: str, config: LlmConfig) -> LlmConfig:
        # Ray Serve LLM gives an engine replica its LLM config's runtime_env in place of the application's
        # (Ray 2.58 llm/_internal/serve/core/server/llm_server.py LLMServer.get_deployment_options, a shallow
        # merge: the config's env_vars replace the app's), so each LLM config carries the hook itself.
        config = _run_shipped_code(config, module_dir)
        if first_chunk_now and config.server_cls is None:
            config = put(config, server_cls=FIRST_CHUNK_SERVER)
        return config

    return document.with_application(app).map_roles(shipped)


def _run_shipped_code(holder: H, module_dir: str, **env_vars: str) -> H:
    """`holder` (the application or an LLM config) with the shipped modules importable and the worker setup hook
    set in its runtime_env, and `env_vars` after them."""
    holder = ensure(holder, "runtime_env")
    # The field as well: an engine process inherits the env var, and vLLM's Ray executor calls ray.init there
    # with the replica's runtime_env, which must name the same hook (Ray 2.58 setup_hook.py
    # _check_setup_hook_consistency); Ray Serve LLM would put its own no-op hook in the field otherwise
    # (llm_server.py LLMServer.get_deployment_options, ENABLE_WORKER_PROCESS_SETUP_HOOK).
    runtime_env = put(holder.runtime_env, worker_process_setup_hook=WORKER_SETUP_HOOK)
    env = {
        **(runtime_env.env_vars or {}),
        "PYTHONPATH": f"{module_dir}:${{PYTHONPATH}}",
        WORKER_SETUP_HOOK_ENV: WORKER_SETUP_HOOK,
        **env_vars,
    }
    return put(holder, runtime_env=put(runtime_env, env_vars=env))


def code_volume() -> dict:
    """The shipped code (ConfigMap): the ingress's, and the head's start module where the GCS store needs it."""
    return {"name": "api-key-ingress", "configMap": {"name": CONFIG_MAP_NAME}}


def code_volume_mount() -> dict:
    return {"name": "api-key-ingress", "mountPath": MODULE_DIR, "readOnly": True}


def volumes() -> list[dict]:
    """The pod volumes of the key check: the keys (Secret) and the ingress code (ConfigMap)."""
    return [{"name": "api-keys", "secret": {"secretName": SECRET_NAME}}, code_volume()]


def volume_mounts() -> list[dict]:
    """Both read-only in every Ray container: the ingress replicas may run on any Ray node."""
    return [{"name": "api-keys", "mountPath": KEYS_DIR, "readOnly": True}, code_volume_mount()]


def _pod_templates(spec: dict) -> list[dict]:
    cluster = spec.get("rayClusterConfig", {})
    groups = [cluster.get("headGroupSpec", {}), *(cluster.get("workerGroupSpecs") or [])]
    return [g.get("template", {}) for g in groups]


def _mounts_code(template: dict) -> bool:
    return any(
        (v.get("configMap") or {}).get("name") == CONFIG_MAP_NAME for v in template.get("spec", {}).get("volumes") or []
    )


def mounts_shipped_code(spec: dict) -> bool:
    """Whether a pod of the RayService spec mounts the shipped code's ConfigMap (then it must exist first)."""
    return any(_mounts_code(t) for t in _pod_templates(spec))


def code_digest(modules: Sequence[str]) -> str:
    """A digest of the shipped modules (names and text)."""
    digest = hashlib.sha256()
    for name, text in sorted(ingress_sources(modules).items()):
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()[:16]


def with_code_digest(spec: dict, modules: Sequence[str]) -> None:
    """Each Ray pod template that mounts the shipped code annotated with the digest of `modules`, the code it mounts.
    A pod sees a changed ConfigMap only after kubelet's next sync, and no Serve replica restarts for it, so new code
    could otherwise meet replicas built for the old (or a serve config naming a module not there yet). With the digest
    in the template, KubeRay's cluster hash changes with the code: a new cluster, whose pods mount it from their
    start (the RayService is replaced, as for any cluster change: ray_llm_eks/domain/render/ray_service.py). Under
    upgradeStrategy NewCluster the old cluster's pods still see the new files at that sync while they serve: the
    ConfigMap keeps its name."""
    digest = code_digest(modules)
    for template in _pod_templates(spec):
        if _mounts_code(template):
            template.setdefault("metadata", {}).setdefault("annotations", {})[CODE_ANNOTATION] = digest


# What a key may hold: RFC 6750's b64token (letters, digits, - . _ ~ + /, then = padding), which a client sends
# in `Authorization: Bearer` as it is. Anything else (`;`, `:`, `|`, quotes) is refused rather than guessed to be
# part of a key or a separator.
KEY_CHARACTERS = re.compile(r"[A-Za-z0-9._~+/-]+=*")
KEY_RULE = (
    f"keys separated by commas, spaces or newlines, each at least {MIN_KEY_LENGTH} characters of letters, digits "
    "and - . _ ~ + / (= at the end), e.g. openssl rand -hex 24"
)


def key_file_content(raw: str | None) -> str:
    """The Secret's file from the `apiKeys` secret: keys separated by commas, spaces or newlines (empty items
    between separators skipped). Runs on the decrypted value (inside an Output), so a bad value fails `pulumi up`
    before the Secret exists: no key at all (`,`, blanks: a file that would refuse every request), a character no
    key holds (`a;b`: one key or two?), a short key. The message never shows a key."""
    keys = [k for k in (raw or "").replace(",", " ").split() if k]
    if not keys:
        raise ConfigError("apiKeys", "[secret]", f"at least one key: found none ({KEY_RULE})")
    odd = sorted({c for k in keys if not KEY_CHARACTERS.fullmatch(k) for c in k if not KEY_CHARACTERS.match(c)})
    if odd:
        raise ConfigError("apiKeys", "[secret]", f"{KEY_RULE}; found {' '.join(repr(c) for c in odd)}")
    short = sum(len(k) < MIN_KEY_LENGTH for k in keys)
    if short:
        raise ConfigError(
            "apiKeys", "[secret]", f"{short} key(s) shorter than {MIN_KEY_LENGTH} characters ({KEY_RULE})"
        )
    return "".join(f"{k}\n" for k in keys)
