"""The plugin's entry point (PulumiPlugin.yaml main): the component provider host for ray_llm_eks's
components. Run from a checkout, the checkout's ray_llm_eks/ is the package (pyproject.toml [project])."""

import sys
from pathlib import Path

try:
    from ray_llm_eks import provider
except ImportError:  # `python ray_llm_eks` from the checkout: its parent holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ray_llm_eks import provider

provider.host()
