"""The checks a stack key and a component's Args field share (one rule, one line, either way in): the
Kubernetes names, bounds and choices the service's objects need. `key` is the stack key or the Args field;
`file` names the Args type where the value came from a component's caller (domain/errors.py line())."""

from __future__ import annotations

import re

from domain.errors import ConfigError, yaml_text
from domain.facts import ENVIRONMENTS, EXACT_CHART_VERSION, KUBERAY_NAMESPACE

# Exist already / belong to the operator: the service creates its own.
TAKEN_NAMESPACES = ("default", KUBERAY_NAMESPACE)


def check_service_name(key: str, value: str, file: str | None = None) -> str:
    # KubeRay derives <name>-head-svc / <name>-serve-svc from it; 47 keeps them valid DNS labels.
    if not isinstance(value, str) or not re.fullmatch(r"[a-z]([-a-z0-9]{0,45}[a-z0-9])?", value):
        raise ConfigError(key, value, "a DNS-1035 label of at most 47 characters", file)
    return value


def check_namespace(key: str, value: str, file: str | None = None) -> str:
    if (
        not isinstance(value, str)
        or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value)
        or value.startswith("kube-")
    ):
        raise ConfigError(key, value, "a DNS-1123 label (not kube-*)", file)
    if value in TAKEN_NAMESPACES:
        raise ConfigError(key, value, f"a namespace of its own, not one of {yaml_text(TAKEN_NAMESPACES)}", file)
    return value


def check_ready_timeout(key: str, value: int, file: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 600 <= value <= 14400:
        raise ConfigError(key, value, "600 to 14400 (image pull + weights + engine start)", file)
    return value


def check_chart_version(key: str, version: str, chart: str, example: str, file: str | None = None) -> str:
    if not isinstance(version, str) or not re.fullmatch(EXACT_CHART_VERSION, version):
        raise ConfigError(key, version, f"an exact version of the {chart} chart, such as {example}", file)
    return version


def check_environment(key: str, value: str, file: str | None = None) -> str:
    if value not in ENVIRONMENTS:
        raise ConfigError(key, value, f"one of {yaml_text(ENVIRONMENTS)}", file)
    return value
