"""Stack files and serve files are UTF-8 (YAML 1.2, Pulumi's own files), whatever the machine's locale: `make plan`
reads a user's accented comment or value as such where Python's default encoding is not UTF-8."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from ray_llm_eks.adapters.environment import CACHE_ENV, cache_dir

# Python's default encoding is ASCII in a POSIX locale once its coercion to UTF-8 is off (PEP 538, PEP 540).
ASCII_LOCALE = {"LC_ALL": "POSIX", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


def test_a_utf8_stack_and_serve_file_plan_where_the_default_encoding_is_ascii(project: Path, tmp_path: Path):
    stack = yaml.safe_load((project / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    stack["config"]["ray-llm-eks:serveConfig"] = "my-serve.yaml"
    (project / "Pulumi.utf8.yaml").write_text(
        "# L'équipe de Zoë: notre pile\n" + yaml.safe_dump(stack, sort_keys=False), encoding="utf-8"
    )
    serve = project / "ray_llm_eks" / "serve_configs" / "pd-disaggregated.yaml"
    (project / "my-serve.yaml").write_text("# modèle servi: « Qwen »\n" + serve.read_text(encoding="utf-8"), "utf-8")
    env = {**os.environ, **ASCII_LOCALE, CACHE_ENV: str(cache_dir())}  # botocore's facts: the cache already made
    out = tmp_path / "plan"
    ran = subprocess.run(
        [sys.executable, "-m", "offline.plan", "--stack", "utf8", "--out", str(out)],
        cwd=project, env=env, capture_output=True, text=True, encoding="utf-8",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert (out / "resources.json").is_file()
