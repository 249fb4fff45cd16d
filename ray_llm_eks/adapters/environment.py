"""Environment variables and the clock: the only place the project reads either."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

# Set to 1 by `make plan` (offline/plan.py) while it runs the program: what only deploying needs
# (the Hugging Face token) is then a warning instead of an error.
OFFLINE_PLAN_ENV = "RAY_LLM_EKS_OFFLINE_PLAN"
TODAY_ENV = "RAY_LLM_EKS_TODAY"
CACHE_ENV = "RAY_LLM_EKS_CACHE"


def offline_plan() -> bool:
    """The program runs under `make plan` (or a test that plans)."""
    return os.environ.get(OFFLINE_PLAN_ENV) == "1"


def offline_plan_set() -> bool:
    """`make plan` or a test set the flag either way: they want typed errors, not the CLI's one line."""
    return OFFLINE_PLAN_ENV in os.environ


def today() -> date:
    """Deploy day; RAY_LLM_EKS_TODAY=YYYY-MM-DD pins it (reproducible plans and tests)."""
    pinned = os.environ.get(TODAY_ENV)
    return date.fromisoformat(pinned) if pinned else date.today()


def cache_dir() -> Path:
    """Where the project keeps what it builds or derives: RAY_LLM_EKS_CACHE, else the XDG cache."""
    root = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ray-llm-eks"
    return Path(root)


def kubeconfig_path() -> Path:
    """The kubeconfig the environment names, as kubectl and the Pulumi Kubernetes provider read it:
    the first file of KUBECONFIG, or ~/.kube/config."""
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def helm_repository_cache() -> Path:
    """Where helm keeps the chart archives it downloaded (`helm env`: HELM_REPOSITORY_CACHE, else
    $XDG_CACHE_HOME/helm/repository, else ~/.cache/helm/repository on Linux)."""
    env = os.environ.get("HELM_REPOSITORY_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "helm" / "repository"
