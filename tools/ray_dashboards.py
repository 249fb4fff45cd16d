"""Regenerate ray_llm_eks/observability/dashboards/ray-*.json: Ray's own Grafana dashboards, written by the pinned Ray
package's generator (ray.dashboard.modules.metrics.grafana_dashboard_factory, the code the Ray head runs to
write them into its session dir), never copied by hand, with our named patches applied on top.

    .venv/bin/python -m tools.ray_dashboards            # rewrite the files
    .venv/bin/python -m tools.ray_dashboards --check    # exit 1 naming each file that differs (a Ray bump)

The generator reads RAY_GRAFANA_<NAME>_DASHBOARD_{UID,GLOBAL_FILTERS,LOG_LINK_URL} from the environment;
they are removed while it runs, so the files are Ray's defaults whatever the shell holds. Each patch must
still change its dashboard: a Ray release that fixes the query makes the tool fail, naming the patch to
drop (UPGRADING.md lists them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ray_llm_eks.domain.core import config_keys
from ray_llm_eks.domain.platform import versions

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "ray_llm_eks" / "observability" / "dashboards"
# The Ray of the default image: its head writes these same dashboards; the generator is the installed package's.
RAY_VERSION = versions.DLC_IMAGES[config_keys.default("dlcImageTag")].ray

# file name -> the factory function that writes it (Ray 2.58 grafana_dashboard_factory).
DASHBOARDS = {
    "ray-default.json": "generate_default_grafana_dashboard",
    "ray-serve.json": "generate_serve_grafana_dashboard",
    "ray-serve-deployment.json": "generate_serve_deployment_grafana_dashboard",
    "ray-serve-llm.json": "generate_serve_llm_grafana_dashboard",
}
_ENV = re.compile(r"^RAY_GRAFANA_\w+_DASHBOARD_(UID|GLOBAL_FILTERS)$|^RAY_GRAFANA_\w+_LOG_LINK_URL$")


@dataclass(frozen=True)
class Patch:
    name: str
    dashboard: str
    pattern: str  # a regular expression over the generated JSON text
    replacement: str
    why: str


PATCHES = (
    Patch(
        name="nixl-failed-transfers-total",
        dashboard="ray-serve-llm.json",
        # Ray 2.58 serve_llm_dashboard_panels.py, panel "NIXL: KV Transfer Failures", queries the bare name.
        pattern=r"\bray_vllm_nixl_num_failed_transfers\b(?!_total)",
        replacement="ray_vllm_nixl_num_failed_transfers_total",
        why=(
            "vLLM 0.26 vllm:nixl_num_failed_transfers is a counter (nixl/stats.py NixlPromMetrics); Ray exports "
            "counters with _total, so the panel's bare name never matches and the panel stays empty"
        ),
    ),
    Patch(
        name="swapped-is-preemptions",
        dashboard="ray-serve-llm.json",
        # Ray 2.58 serve_llm_dashboard_panels.py, panel "Scheduler: Swapped": _gauge_with_join of the V0 gauge.
        pattern=r"\bray_vllm_num_requests_swapped(\{[^}]*\})",
        replacement=r"rate(ray_vllm_num_preemptions_total\1[$interval])",
        why=(
            "vLLM 0.26 (V1) has no swap space and exports no vllm:num_requests_swapped (ray_llm_eks/observability/"
            "exported-metrics.txt); a request pushed out of the running batch is a preemption, counted by "
            "vllm:num_preemptions (v1/metrics/loggers.py PrometheusStatLogger)"
        ),
    ),
    Patch(
        name="swapped-panel-title",
        dashboard="ray-serve-llm.json",
        pattern=r'"title": "Scheduler: Swapped"',
        replacement='"title": "Scheduler: Preemptions/s"',
        why="the panel swapped-is-preemptions rewrites now shows preemptions per second",
    ),
)


class PatchStale(RuntimeError):
    pass


@contextlib.contextmanager
def _without_overrides() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in list(os.environ) if _ENV.match(k)}
    try:
        yield
    finally:
        os.environ.update(saved)


def apply_patches(name: str, text: str, patches: tuple[Patch, ...] = PATCHES) -> str:
    """`text` with every patch of dashboard `name` applied; PatchStale where one no longer matches."""
    for patch in patches:
        if patch.dashboard != name:
            continue
        text, count = re.subn(patch.pattern, patch.replacement, text)
        if count == 0:
            raise PatchStale(
                f"patch {patch.name!r} no longer changes {name}: Ray fixed it? Drop it here and in UPGRADING.md"
            )
    return text


def generate() -> dict[str, str]:
    """file name -> dashboard JSON text (Ray's indent=4 output, patched, newline-terminated)."""
    import ray
    from ray.dashboard.modules.metrics import grafana_dashboard_factory as factory

    if ray.__version__ != RAY_VERSION:
        raise SystemExit(f"ray {ray.__version__} is installed; these dashboards are Ray {RAY_VERSION}'s")
    out = {}
    with _without_overrides():
        for name, function in DASHBOARDS.items():
            text, _uid = getattr(factory, function)()
            text = apply_patches(name, text)
            json.loads(text)  # still JSON after the patches
            out[name] = text + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ray_dashboards", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = parser.parse_args(argv)
    try:
        generated = generate()
    except PatchStale as exc:
        print(f"ray_dashboards: {exc}", file=sys.stderr)
        return 1
    if args.check:
        stale = [n for n, t in generated.items() if not (OUT / n).is_file() or (OUT / n).read_text() != t]
        for name in stale:
            print(f"{OUT.relative_to(ROOT) / name} differs from what Ray {RAY_VERSION} generates", file=sys.stderr)
        if stale:
            print("regenerate: .venv/bin/python -m tools.ray_dashboards", file=sys.stderr)
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in generated.items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT.relative_to(ROOT) / name} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
