"""checkov (framework kubernetes) over what the stack runs: the offline plan's Kubernetes objects plus the
pod templates inside each RayService (its head and every worker group), written out as the Pods KubeRay
makes from them (checkov reads a custom resource's spec as nothing), and each Helm release's chart rendered
with the plan's values where its archive can be had (offline/chart_render.py). Each failure must be justified in
policy/checkov-skips.yaml (check ID, the resources it covers, one line of why), and docs/security.md lists
them (`make docs` writes that table; a test fails while it is stale).

checkov runs from its own venv (policy/checkov-requirements.txt, `make policy` installs it), so this module
only writes files, runs it and reads its JSON.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import yaml

from offline import ROOT

SKIPS_FILE = ROOT / "policy" / "checkov-skips.yaml"
DOCS_FILE = ROOT / "docs" / "security.md"
# The generated table's bounds in docs/security.md.
DOCS_BEGIN = "<!-- checkov-skips: begin (make docs writes this table from policy/checkov-skips.yaml) -->"
DOCS_END = "<!-- checkov-skips: end -->"
NOT_OBJECTS = {"HelmRelease"}  # the plan's rendering of a Helm release (chart, version, values), no object


@dataclass(frozen=True)
class Failure:
    check: str  # checkov's check ID, such as CKV_K8S_20
    title: str  # checkov's name for it
    resource: str  # checkov's resource: Kind.namespace.name

    def __str__(self) -> str:
        return f"checkov {self.check} on {self.resource}: {self.title}"


@dataclass(frozen=True)
class Skip:
    check: str
    resources: tuple[str, ...]  # fnmatch patterns over checkov's resource names
    why: str

    def covers(self, failure: Failure) -> bool:
        return failure.check == self.check and any(fnmatchcase(failure.resource, p) for p in self.resources)


def ray_pods(rayservice: dict) -> dict[str, dict]:
    """The Pods KubeRay creates from a RayService's templates, keyed by a file name: the head
    (`<name>-head`) and one per worker group (`<name>-<group>-worker`), named as KubeRay's pods begin."""
    meta = rayservice.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    cluster = (rayservice.get("spec") or {}).get("rayClusterConfig") or {}
    groups = [("head", (cluster.get("headGroupSpec") or {}).get("template") or {})]
    groups += [(f"{w['groupName']}-worker", w.get("template") or {}) for w in cluster.get("workerGroupSpecs") or []]
    pods = {}
    for suffix, template in groups:
        metadata = {"name": f"{name}-{suffix}", "namespace": namespace} | {
            k: v for k, v in (template.get("metadata") or {}).items() if k in ("labels", "annotations")
        }
        pods[f"pod--{name}-{suffix}.yaml"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": template.get("spec") or {},
        }
    return pods


def scanned(manifests: dict[str, dict], charts: dict[str, dict] | None = None) -> dict[str, dict]:
    """What checkov reads: every Kubernetes object of the plan, the Pods of every RayService, and the objects of
    the Helm charts as rendered with the plan's values (offline/chart_render.py), in place of their releases."""
    docs = dict(charts or {})
    for file, doc in manifests.items():
        if doc.get("kind") in NOT_OBJECTS:
            continue
        docs[file] = doc
        if doc.get("kind") == "RayService":
            docs |= ray_pods(doc)
    return docs


def run(checkov: Path, docs: dict[str, dict]) -> list[Failure]:
    """checkov's failed checks over the documents, written to a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="checkov-") as tmp:
        for file, doc in docs.items():
            (Path(tmp) / file).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        # --skip-download: checkov asks its vendor's API for check metadata otherwise (no network needed here).
        proc = subprocess.run(
            [str(checkov), "-d", tmp, "--framework", "kubernetes", "-o", "json", "--quiet", "--skip-download"],
            capture_output=True,
            text=True,
        )
    # Exit 1 means checks failed; anything else but 0 is checkov itself failing.
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"checkov exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    reports = report if isinstance(report, list) else [report]  # one per framework; `{}` when nothing parsed
    return sorted(
        (
            Failure(f["check_id"], f["check_name"], f["resource"])
            for r in reports
            for f in (r.get("results") or {}).get("failed_checks", [])
        ),
        key=lambda f: (f.check, f.resource),
    )


def load_skips(path: Path = SKIPS_FILE) -> list[Skip]:
    """policy/checkov-skips.yaml: a list of {check, resources, why}; a bad entry is one line naming it."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    skips = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != {"check", "resources", "why"}:
            raise ValueError(f"{path.name}[{i}]: {entry!r}: allowed is a mapping of check, resources, why")
        resources = entry["resources"]
        why = entry["why"]
        if not isinstance(resources, list) or not resources or not all(isinstance(r, str) for r in resources):
            raise ValueError(f"{path.name}[{i}] resources: {resources!r}: allowed is a list of resource patterns")
        if not isinstance(why, str) or not why.strip() or "\n" in why.strip():
            raise ValueError(f"{path.name}[{i}] why: {why!r}: allowed is one line of text")
        skips.append(Skip(str(entry["check"]), tuple(resources), why.strip()))
    return skips


def unjustified(failures: list[Failure], skips: list[Skip]) -> list[Failure]:
    return [f for f in failures if not any(s.covers(f) for s in skips)]


def docs_table(skips: list[Skip]) -> str:
    rows = ["| check | resources | why it stays |", "|---|---|---|"]
    rows += [f"| {s.check} | {', '.join(f'`{r}`' for r in s.resources)} | {s.why} |" for s in skips]
    return "\n".join([DOCS_BEGIN, *rows, DOCS_END])


def docs_with_table(text: str, skips: list[Skip]) -> str:
    """docs/security.md's text with the table between its markers replaced by the skips' own."""
    start, end = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    return text[:start] + docs_table(skips) + text[end:]


def main() -> int:
    """`python -m offline.checkov_scan`: rewrite docs/security.md's table of justified checkov failures."""
    DOCS_FILE.write_text(docs_with_table(DOCS_FILE.read_text(encoding="utf-8"), load_skips()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
