"""Run the real program offline and describe what it would create.

    python -m offline.plan --stack dev --out plan-dev

writes resources.json, manifests/, graph.md and prints a summary. This is an offline plan under
Pulumi's mocks, not `pulumi preview`: nothing is compared with real state and AWS is never asked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import runpy
import shutil
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from offline import ROOT
from ray_llm_eks.adapters import stack as stack_adapter
from ray_llm_eks.adapters.environment import OFFLINE_PLAN_ENV
from ray_llm_eks.adapters.stackfile import SECRET_TEXT
from ray_llm_eks.domain.stack import cost

if TYPE_CHECKING:
    from offline.mocks import RecordingMonitor, Registration

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
SECRET_KINDS = {"Secret"}  # their data never reaches a rendered manifest


@dataclass
class Plan:
    """Everything one run of the program declared."""

    stack: str
    registrations: list[Registration]
    outputs: dict = field(default_factory=dict)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # pulumi.log.warn lines, as `pulumi up` would show

    # ---- lookups used by tests and the writer
    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registration:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} named {name!r}, found {[r.name for r in found]}")
        return found[0]

    @cached_property
    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.registrations}

    def ancestors(self, urn: str) -> list[str]:
        chain = []
        parent = self.by_urn[urn].parent
        while parent in self.by_urn:
            chain.append(parent)
            parent = self.by_urn[parent].parent
        return chain

    def descendants(self, urn: str) -> list[str]:
        return [r.urn for r in self.registrations if urn in self.ancestors(r.urn)]

    def waits_for(self, urn: str) -> set[str]:
        """Every URN this resource waits for on create (and outlives it on destroy): its own and its
        ancestors' dependencies, a component dependency standing for all of its children."""
        direct = set(self.by_urn[urn].dependencies)
        for ancestor in self.ancestors(urn):
            direct |= set(self.by_urn[ancestor].dependencies)
        expanded = set(direct)
        for dep in direct:
            if dep in self.by_urn:
                expanded |= set(self.descendants(dep))
        return expanded

    def depends_on(self, urn: str, target_urn: str) -> bool:
        return target_urn in self.waits_for(urn)

    # ---- what does work on `up`
    def _workers(self) -> list[Registration]:
        """Custom resources plus remote components (their hidden children are real resources, and the
        component stands for them: a modelled child is not counted again)."""
        return [
            r
            for r in self.registrations
            if (r.custom or r.remote) and not r.type.startswith("pulumi:providers:") and "modelled" not in r.options
        ]

    def longest_chain(self) -> list[Registration]:
        """The longest sequence of resources `pulumi up` must create one after another."""
        workers = {r.urn: r for r in self._workers()}
        memo: dict[str, list[str]] = {}

        def chain(urn: str) -> list[str]:
            if urn not in memo:
                before = [chain(d) for d in sorted(self.waits_for(urn)) if d in workers and d != urn]
                memo[urn] = [*max(before, key=len, default=[]), urn]
            return memo[urn]

        best = max((chain(u) for u in sorted(workers)), key=len, default=[])
        return [workers[u] for u in best]

    # ---- renderings
    def in_order(self) -> list[Registration]:
        """Registrations by URN: the program registers concurrently, so the arrival order varies from
        run to run; files written from this order are byte-identical for identical input."""
        return sorted(self.registrations, key=lambda r: r.urn)

    def resources_json(self) -> list[dict]:
        rows = []
        for r in self.in_order():
            row = asdict(r)
            rows.append(
                {k: row[k] for k in ("urn", "type", "name", "id", "parent", "dependencies", "provider")}
                | {"inputs": _sorted_keys(r.inputs), "options": row["options"], "remote": r.remote}
            )
        return rows

    def manifests(self) -> dict[str, dict]:
        """One document per Kubernetes object and per Helm release, keyed by file name."""
        docs = {}
        for r in self.in_order():
            if not r.type.startswith("kubernetes:") or r.type.startswith("pulumi:providers:"):
                continue
            if r.type == HELM_RELEASE:
                doc = {
                    "kind": "HelmRelease",
                    "name": r.inputs.get("name"),
                    "namespace": r.inputs.get("namespace"),
                    "chart": r.inputs.get("chart"),
                    "repo": (r.inputs.get("repositoryOpts") or {}).get("repo"),
                    "version": r.inputs.get("version"),
                    "values": _sorted_keys(r.inputs.get("values") or {}),
                }
            else:
                head = ("apiVersion", "kind", "metadata")
                inputs = _sorted_keys(r.inputs)
                doc = {k: inputs[k] for k in head if k in inputs}
                doc |= {k: v for k, v in inputs.items() if k not in (*head, "__defaults")}
                if doc.get("kind") in SECRET_KINDS:
                    for key in ("data", "stringData"):
                        if isinstance(doc.get(key), dict):
                            doc[key] = dict.fromkeys(doc[key], SECRET_TEXT)  # keys stay, values never
                        elif key in doc:
                            doc[key] = SECRET_TEXT  # the whole map was a secret Output
            docs[f"{_slug(r.type)}--{_slug(r.name)}.yaml"] = doc
        return docs

    def graph_mermaid(self) -> str:
        """Top-level components and what they wait for, as a mermaid flowchart."""
        top = [r for r in self.in_order() if r.parent is None or r.parent not in self.by_urn]
        owner = {}
        for r in self.registrations:
            roots = [r.urn, *self.ancestors(r.urn)]
            owner[r.urn] = roots[-1]
        edges = set()
        for r in self.registrations:
            for dep in r.dependencies:
                a, b = owner.get(r.urn), owner.get(dep)
                if a and b and a != b:
                    edges.add((b, a))
        ids = {r.urn: f"n{i}" for i, r in enumerate(top)}
        lines = ["```mermaid", "flowchart LR"]
        lines += [f'  {ids[r.urn]}["{r.name}<br/><small>{r.type}</small>"]' for r in top]
        lines += [f"  {ids[a]} --> {ids[b]}" for a, b in sorted(edges) if a in ids and b in ids]
        lines.append("```")
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        counts = Counter(r.type for r in self.registrations)
        lines = [
            f"Offline plan of stack '{self.stack}' (Pulumi mocks, not `pulumi preview`): "
            f"{len(self.registrations)} resources in {self.seconds:.1f}s",
            "",
        ]
        lines += [f"  {n:3d}  {t}" for t, n in sorted(counts.items())]
        chain = self.longest_chain()
        lines += ["", f"Longest dependency chain ({len(chain)} steps `pulumi up` runs in sequence):"]
        lines += [f"  {i + 1:2d}. {r.type} {r.name}" for i, r in enumerate(chain)]
        if self.outputs.get("servingFit"):
            lines += ["", "GPU memory per role (vLLM 0.26, predicted; docs/architecture.md, the fit):"]
            lines += [f"  {line}" for line in self.outputs["servingFit"]]
        if self.outputs.get("gcsFaultTolerance"):
            lines += ["", self.outputs["gcsFaultTolerance"]]
        if self.outputs.get("upgradeImpact"):
            lines += ["", "What a change does to the running service (docs/faults-and-upgrades.md):"]
            lines += [f"  {line}" for line in self.outputs["upgradeImpact"]]
        if "costEstimate" in self.outputs:
            lines += ["", cost.table(self.outputs["costEstimate"])]
            if "hourlyCostRangeUsd" in self.outputs:
                lines.append(cost.range_line(self.outputs["hourlyCostRangeUsd"]))
        if self.warnings:
            lines += ["", "Warnings (`pulumi up` shows them too):"]
            lines += [f"  warning: {w}" for w in self.warnings]
        if "preflightChecks" in self.outputs:
            lines += ["", "Deploy-time checks (AWS data sources; run by `pulumi preview`/`up`):"]
            lines += [f"  {line}" for line in self.outputs["preflightChecks"]]
        if self.outputs.get("deferredChecks"):
            lines += [
                "",
                "Checks an offline plan cannot run (sealed secrets, an unreachable cluster; `pulumi up` runs them):",
            ]
            lines += [f"  {line}" for line in self.outputs["deferredChecks"]]
        return "\n".join(lines)

    def write(self, out: Path) -> None:
        if out.exists():
            if any(out.iterdir()) and not (out / "resources.json").exists():
                # OUT=. or a typo must never wipe the project: only an earlier plan is replaced.
                raise FileExistsError(f"{out} exists and is not a plan directory (no resources.json): pick another OUT")
            shutil.rmtree(out)
        (out / "manifests").mkdir(parents=True)
        (out / "resources.json").write_text(json.dumps(self.resources_json(), indent=2) + "\n", encoding="utf-8")
        for name, doc in self.manifests().items():
            (out / "manifests" / name).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            serve = (doc.get("spec") or {}).get("serveConfigV2") if doc.get("kind") == "RayService" else None
            if isinstance(serve, str):  # the same YAML, readable instead of one escaped string
                (out / "manifests" / name.replace(".yaml", ".serveConfigV2.yaml")).write_text(serve, encoding="utf-8")
        (out / "graph.md").write_text(
            f"# Components of stack {self.stack}\n\n" + self.graph_mermaid(), encoding="utf-8"
        )
        (out / "outputs.json").write_text(json.dumps(self.outputs, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _sorted_keys(value):
    """Mappings with their keys in order, all the way down (lists keep theirs)."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_")


def _resolve(value):
    """A stack output as plain JSON; a secret output becomes `[secret]`."""
    import pulumi
    from pulumi.runtime.sync_await import _sync_await

    output = pulumi.Output.from_input(value)
    if _sync_await(output.is_secret()):
        return SECRET_TEXT
    return _sync_await(output.future())


class _Warnings(logging.Handler):
    """Collects what the program sends to pulumi.log.warn (the mock engine logs it here)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def _without_source_positions():
    """The SDK attaches to every registration a source position built from a full traceback of the
    caller's stack (for the Pulumi Cloud console); the mock monitor never reads it, and under pytest's
    deep stack it was a quarter of a plan's CPU (cProfile). The function is private: an SDK without
    it keeps its own behaviour."""
    from pulumi.runtime import resource as sdk_resource
    from pulumi.runtime.proto import source_pb2

    original = getattr(sdk_resource, "_get_stack_trace", None)
    if original is None:
        yield
        return
    sdk_resource._get_stack_trace = source_pb2.StackTrace  # an empty trace: no source position
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = original


_ERRORS_RAISED: set[str] = set()  # root messages of the errors run_program raised in this process


def _quiet_leftovers_of_failed_runs(loop, context) -> None:
    """A run that fails mid-registration leaves futures holding its error (every output of the resource
    that failed: 890 for one pulumi-eks refusal); when they are collected, asyncio logs each as "never
    retrieved" with a formatted traceback (2 s of CPU in pytest, measured). run_program raised that
    error already; anything else goes to asyncio's own handler."""
    error = context.get("exception")
    leftover = error is not None and "never retrieved" in context.get("message", "")
    if leftover and root_message(error) in _ERRORS_RAISED:
        return
    loop.default_exception_handler(context)


def run_program(
    stack: str,
    overrides: dict | None = None,
    root: Path = ROOT,
    monitor: RecordingMonitor | None = None,
    offline_plan: bool | None = True,
) -> Plan:
    """Run __main__.py under mocks with the stack file's config (plus test overrides). Pass a
    `monitor` to look at what was registered even when the program fails. `offline_plan=False` runs
    it as `pulumi up` would (what the plan only warns about, e.g. a missing hfToken, is refused);
    None leaves the environment as the Pulumi CLI does (errors then arrive as pulumi.RunError)."""
    # Pulumi and the mocks are imported here, not at the top: a stack mistake is reported by
    # precheck() before these (slow) imports happen.
    import pulumi
    from pulumi.runtime import settings as pulumi_settings
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

    from offline.mocks import PlanMocks, RecordingMonitor

    started = time.perf_counter()
    config = stack_adapter.stack_file(stack, root, overrides)
    monitor = monitor or RecordingMonitor(PlanMocks())
    mocks = monitor.mocks
    warnings = _Warnings()
    logger = logging.getLogger(f"{__name__}.{id(warnings)}")
    logger.propagate = False
    logger.addHandler(warnings)
    # set_mocks registers the root stack on the current loop; an asyncio.run before this one (a caller's, or a
    # test's) leaves none current (asyncio.run ends with set_event_loop(None)).
    _ensure_event_loop()
    with _without_source_positions():  # from set_mocks on, which registers the root stack
        pulumi_settings.ROOT.set(None)  # a fresh root stack per run
        pulumi.runtime.set_mocks(
            mocks, project=config.project, stack=stack, preview=False, monitor=monitor, logger=logger
        )
        pulumi.runtime.set_all_config(config.values, sorted(config.secret_keys))
        pulumi_settings.SETTINGS.rpc_manager.clear()
        # A run that failed mid-registration leaves unfinished outputs behind; the next run would wait
        # for them and re-raise their error.
        with pulumi_settings.SETTINGS.lock:
            pulumi_settings.SETTINGS.outputs.clear()
        previous = os.environ.get(OFFLINE_PLAN_ENV)
        if offline_plan is not None:
            os.environ[OFFLINE_PLAN_ENV] = "1" if offline_plan else "0"
        _ensure_event_loop().set_exception_handler(_quiet_leftovers_of_failed_runs)
        try:
            # In the project's folder, as the Pulumi CLI's language host runs a program: paths a stack names
            # (serveConfig: my-serve.yaml) are beside its stack file.
            with contextlib.chdir(root):
                _sync_await(run_pulumi_func(lambda: runpy.run_path(str(root / "__main__.py"), run_name="__main__")))
        except Exception as err:
            _ERRORS_RAISED.add(root_message(err))
            raise
        finally:
            if previous is None:
                os.environ.pop(OFFLINE_PLAN_ENV, None)
            else:
                os.environ[OFFLINE_PLAN_ENV] = previous
            logger.removeHandler(warnings)
    exported = pulumi_settings.get_root_resource().outputs
    outputs = {name: _resolve(value) for name, value in exported.items()}
    return Plan(stack, monitor.registrations, outputs, time.perf_counter() - started, warnings.lines)


def root_message(err: Exception) -> str:
    """The SDK wraps an error raised while a resource registers in one line per enclosing resource
    ("ValueError has risen: ..."); the last line is the error itself."""
    return str(err).strip().splitlines()[-1].split("has risen: ")[-1]


def precheck(stack: str, root: Path = ROOT) -> None:
    """The stack file and every setting checked as the program will check them, before Pulumi is
    imported: a mistake costs a second, not the SDKs' import time."""
    stack_adapter.load_settings(stack_adapter.stack_file(stack, root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        precheck(args.stack, ROOT)
        plan = run_program(args.stack, root=ROOT)
    except ValueError as err:  # ConfigError, StackFileError, PulumiEksRefusal: one line, no traceback
        print(f"error: {root_message(err)}", file=sys.stderr)
        return 2
    try:
        plan.write(args.out)
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # OUT is a file, or not writable: one line naming it
        print(f"error: OUT={args.out}: {err.strerror}: a directory this user can write", file=sys.stderr)
        return 2
    print(plan.summary())
    written = len(list((args.out / "manifests").iterdir()))
    print(f"\nWrote {args.out}/resources.json, manifests/ ({written} files), graph.md, outputs.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
