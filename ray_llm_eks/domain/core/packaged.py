"""The one reader of files in ray_llm_eks/domain/: data that ships with the code, read-only (ray_llm_eks/domain/data/*,
ray_llm_eks/serve_configs/*.yaml, ray_llm_eks/serve_ingress/*.py). Callers pass paths built from ROOT or from their own
package's folder, never from the environment or the user's home; nothing here writes. Everything
else from outside (stack files, kubeconfigs, caches, environment variables) is read in ray_llm_eks/adapters/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray_llm_eks.domain.core import yaml_files

ROOT = Path(__file__).resolve().parents[2]  # the package, ray_llm_eks/ (domain/core/ is two below it)
DATA = ROOT / "domain" / "data"  # the tables shipped with the domain (config keys, vLLM's arguments, known issues)


def shown(path: Path) -> str:
    """A path as an error line names it: from the package's own name down (ray_llm_eks/serve_configs/...),
    which is where it lies in the checkout and in site-packages alike."""
    try:
        return str(path.resolve().relative_to(ROOT.parent))
    except ValueError:
        return str(path)


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load_yaml(path: Path) -> Any:
    return yaml_files.parse(path.read_text(encoding="utf-8"), shown(path))


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def names(folder: Path, suffix: str) -> list[str]:
    """Stems of the files of one kind in a shipped folder (ray_llm_eks/serve_configs/*.yaml)."""
    return sorted(p.stem for p in folder.glob(f"*{suffix}"))
