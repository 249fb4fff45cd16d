"""The plugin's entry point (PulumiPlugin.yaml main): the component provider host for ray_llm_eks's
components. Run from a checkout, the checkout's folders are the package (pyproject.toml [project])."""

import sys
from pathlib import Path

try:
    import ray_llm_eks
except ImportError:  # `python ray_llm_eks` from the checkout: its parent holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import ray_llm_eks

from pulumi.provider.experimental import component_provider_host

component_provider_host(list(ray_llm_eks.HOSTED), ray_llm_eks.PACKAGE, version=ray_llm_eks.VERSION)
