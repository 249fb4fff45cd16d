"""The one way from a stack to Settings, for every caller: the running program (Pulumi's config),
`make plan`, the rehearsals, the e2e and the tests (a Pulumi.<stack>.yaml read as the CLI reads it).

    config = stack_file("dev", ROOT)      # ROOT: the checkout; or running_stack() inside the Pulumi program
    settings = load_settings(config)      # typed and validated, or one ConfigError; its deploy_mode too

A secret key's value never reaches ray_llm_eks/domain/: it reads as SECRET_MARKER, and Settings records only
whether it is set. The running program gets the secrets themselves as Pulumi Outputs from
stack_secrets(), and hands them to the components that need them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ray_llm_eks.adapters import botocore_facts, environment, stackfile
from ray_llm_eks.adapters.stackfile import StackConfig
from ray_llm_eks.domain.core import config_keys, yaml_files
from ray_llm_eks.domain.core.errors import PROJECT, ConfigError, did_you_mean
from ray_llm_eks.domain.core.facts import SECRET_MARKER
from ray_llm_eks.domain.loading import config
from ray_llm_eks.domain.serving import serve_config
from ray_llm_eks.domain.stack.settings import Settings


def stack_file(stack: str, root: Path, overrides: Mapping[str, Any] | None = None) -> StackConfig:
    """Pulumi.<stack>.yaml of the project folder `root` (the checkout, or a copy of its project files) as the Pulumi
    CLI would hand its config to the program (secrets as markers)."""
    return stackfile.load_stack(stack, root, dict(overrides) if overrides is not None else None)


def service_settings(stack: str, keys: Mapping[str, str]) -> Settings:
    """Settings of a service on a cluster this program does not make (existingCluster), from the ray-llm-eks
    stack keys `keys` (full names, values as `pulumi config` hands them over: structures as JSON): a component's
    typed inputs become the keys a stack file takes and pass the same checks, each rule kept in one place."""
    values = {f"{PROJECT}:existingCluster": "true", **keys}
    return load_settings(StackConfig(PROJECT, stack, values, frozenset()))


def running_stack() -> StackConfig:
    """The config the Pulumi engine handed to this program (the CLI, the Automation API or mocks)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    # The SDK has no public way to list the config it was given: the CLI's language host passes it in
    # PULUMI_CONFIG (public get_config_env), but the Automation API's inline programs and the mocks
    # set the private CONFIG context variable (pulumi 3.272.0, pulumi/runtime/config.py set_all_config).
    # Listed in UPGRADING.md.
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    values = {key: str(value) for key in keys if (value := runtime_config.get_config(key)) is not None}
    secrets = frozenset(k for k in values if runtime_config.is_config_secret(k))
    # The secrets' values are read apart, as Outputs (stack_secrets): none is kept here in plain text.
    hidden = {f"{PROJECT}:{key}" for key in config_keys.secret_keys()}
    values = {key: SECRET_MARKER if key in hidden else value for key, value in values.items()}
    return StackConfig(PROJECT, pulumi.get_stack(), values, secrets)


def _getter(config_: StackConfig):
    """`get(key)` over the stack's values; a key the table declares secret reads as SECRET_MARKER."""
    secret = config_keys.secret_keys()

    def get(key: str) -> str | None:
        value = config_.values.get(key if ":" in key else f"{config_.project}:{key}")
        return SECRET_MARKER if value is not None and key in secret else value

    return get


def own_serve_file(config_: StackConfig) -> serve_config.OwnServeFile | None:
    """The stack's serveConfig where it names a file of the user's beside the stack file, read and parsed (its
    YAML slips one line naming it); None where it names a shipped one."""
    name = config_.values.get(f"{config_.project}:serveConfig")
    if name is None or not serve_config.is_own_file(name):
        return None
    folder = config_.folder or Path.cwd()  # `pulumi up` runs the program in the project's folder
    path = folder / name
    if Path(name).is_absolute() or not path.is_file():
        files = sorted(str(p.relative_to(folder)) for p in folder.glob("*.y*ml") if not p.name.startswith("Pulumi"))
        slip = did_you_mean(name, files).strip()
        where = (
            "an absolute path" if Path(name).is_absolute() else f"no such file in {folder}{'; ' + slip if slip else ''}"
        )
        raise ConfigError("serveConfig", name, f"{serve_config.SERVE_CONFIG_ALLOWED} ({where})", config_.file)
    return serve_config.OwnServeFile(name, yaml_files.parse(path.read_text(encoding="utf-8"), name))


def load_settings(config_: StackConfig) -> Settings:
    """The stack's Settings: every key known, every value checked (ConfigError on the first bad one)."""
    config_keys.refuse_unknown(sorted(config_.values))
    get = _getter(config_)
    own = own_serve_file(config_)
    try:
        return config.load_settings(get, config_.stack, get("aws:region"), botocore_facts.load(), own)
    except ConfigError as err:
        if err.file is not None or config_.file is None:
            raise
        # A stack value's line names the file it was read from, as the stack file reader's own lines do.
        raise ConfigError(err.key, err.value, err.allowed, config_.file) from None


@dataclass(frozen=True)
class StackSecrets:
    """The running stack's secrets, as Pulumi secret Outputs (None where unset)."""

    hf_token: Any = None
    api_keys: Any = None
    kubeconfig: Any = None
    ray_auth_token: Any = None


def stack_secrets() -> StackSecrets:
    import pulumi

    project_config = pulumi.Config(PROJECT)
    return StackSecrets(
        hf_token=project_config.get_secret("hfToken"),
        api_keys=project_config.get_secret("apiKeys"),
        kubeconfig=project_config.get_secret("kubeconfig"),
        ray_auth_token=project_config.get_secret("rayAuthToken"),
    )


def sealed_secrets() -> frozenset[str]:
    """The secret keys whose content this run cannot read: offline, a stack file's `secure:` value, which
    reads as SECRET_MARKER (stackfile.load_stack). `pulumi up` decrypts every one: none there."""
    if deploying():
        return frozenset()
    from pulumi.runtime import config as runtime_config  # get_config: no warning for reading a secret in plain

    keys = config_keys.secret_keys()
    return frozenset(key for key in keys if runtime_config.get_config(f"{PROJECT}:{key}") == SECRET_MARKER)


def deploying() -> bool:
    """`pulumi up`/`preview`, as opposed to `make plan` (which only warns about what deploying needs)."""
    return not environment.offline_plan()


def changed_stack_passes(config_: StackConfig) -> Callable[[Mapping[str, Any]], bool]:
    """Whether the stack, with some fields changed, loads without a ConfigError: every check `make plan`
    runs before any resource (not the AWS preflight). `changes` maps a key path (`replicas.prefill`,
    `gpuPools.decode.instanceType`) to a value; structured keys are JSON text, as the CLI hands them over."""

    def passes(changes: Mapping[str, Any]) -> bool:
        values = dict(config_.values)
        for path, value in changes.items():
            name, *fields = path.split(".")
            key = f"{config_.project}:{name}"
            doc = json.loads(values[key]) if key in values else {}
            node = doc
            for field in fields[:-1]:
                node = node.setdefault(field, {})
            node[fields[-1]] = value
            values[key] = json.dumps(doc)
        try:
            load_settings(replace(config_, values=values))
        except ConfigError:
            return False
        return True

    return passes
