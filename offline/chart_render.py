"""The stack's Helm charts as the cluster gets them, for checkov: each HelmRelease of the offline plan (chart,
version, repository, values) rendered by `helm template` with the plan's values, its objects named as they are
installed (metadata.namespace is the release's where the chart leaves it out, as `helm install` does).

The chart archive comes from, in order: a folder the user names (`make policy CHARTS=<dir>`), helm's own
repository cache (what `helm install --repo` or `helm pull` left there), the project's own chart cache, and,
only when asked (`make policy PULL_CHARTS=1`), `helm pull` into that cache. A chart none of these has is
reported in one line and not scanned: Helm repositories and OCI registries are not reachable everywhere
`make policy` runs (CI reaches package registries only).

helm is the e2e build's (go_binaries/build.py HELM_VERSION) or the PATH's.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from go_binaries import build
from ray_llm_eks.adapters import environment

OCI = "oci://"
# How long one `helm pull` may take: a repository that answers sends a chart of a few hundred KB in seconds;
# one that is not reachable should cost little more than its timeout.
PULL_TIMEOUT_S = 60
# Kinds without a namespace (Kubernetes API reference): helm installs them cluster-wide, whatever --namespace says.
CLUSTER_SCOPED = {
    "APIService",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
}


@dataclass(frozen=True)
class Release:
    """One HelmRelease of the plan (offline/plan.py manifests)."""

    name: str
    namespace: str
    chart: str  # for an OCI chart, its whole reference (oci://registry/path/chart)
    version: str
    repo: str | None
    values: dict

    @property
    def chart_name(self) -> str:
        return self.chart.rsplit("/", 1)[-1]

    @property
    def source(self) -> str:
        return self.chart.rsplit("/", 1)[0] if self.chart.startswith(OCI) else str(self.repo)

    def __str__(self) -> str:
        return f"chart {self.chart_name} {self.version} from {self.source}"


def releases(manifests: dict[str, dict]) -> list[Release]:
    return [
        Release(
            str(d["name"]),
            str(d.get("namespace") or "default"),
            str(d["chart"]),
            str(d["version"]),
            d.get("repo"),
            d.get("values") or {},
        )
        for d in manifests.values()
        if d.get("kind") == "HelmRelease"
    ]


def helm_binary() -> Path | None:
    built = build.bin_dirs()["helm"] / "helm"
    if built.is_file():
        return built
    found = shutil.which("helm")
    return Path(found) if found else None


def pull_cache() -> Path:
    """Where `make policy` pulls the archives it did not find (one folder under the project's cache root)."""
    return environment.cache_dir() / "charts"


def _chart_yaml(archive: Path) -> dict:
    """Chart.yaml of an archive (<chart>/Chart.yaml inside the .tgz) or of an unpacked chart folder."""
    if archive.is_dir():
        return yaml.safe_load((archive / "Chart.yaml").read_text(encoding="utf-8")) or {}
    with tarfile.open(archive) as tar:
        member = next((m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")), None)
        handle = tar.extractfile(member) if member else None
        return (yaml.safe_load(handle.read()) or {}) if handle else {}


def _is(release: Release, candidate: Path) -> bool:
    try:
        meta = _chart_yaml(candidate)
    except (OSError, tarfile.TarError, yaml.YAMLError, AttributeError):
        return False
    return meta.get("name") == release.chart_name and str(meta.get("version")) == release.version


def find_archive(release: Release, folders: list[Path]) -> Path | None:
    """The chart at its version in one of the folders: <chart>-<version>.tgz as helm names it, or an unpacked
    chart folder (<chart>-<version>/ or <chart>/) whose Chart.yaml says that name and version."""
    for folder in folders:
        for candidate in (
            folder / f"{release.chart_name}-{release.version}.tgz",
            folder / f"{release.chart_name}-{release.version}",
            folder / release.chart_name,
        ):
            if candidate.exists() and _is(release, candidate):
                return candidate
    return None


def pull(helm: Path, release: Release, into: Path) -> tuple[Path | None, str]:
    """`helm pull` of the chart at its version into the folder: the archive, or None and helm's last line."""
    into.mkdir(parents=True, exist_ok=True)
    if release.chart.startswith(OCI):
        args = [release.chart, "--version", release.version]
    else:
        args = ["--repo", str(release.repo), release.chart_name, "--version", release.version]
    try:
        proc = subprocess.run(
            [str(helm), "pull", *args, "--destination", str(into)],
            capture_output=True,
            text=True,
            timeout=PULL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, f"helm pull gave no answer in {PULL_TIMEOUT_S} s"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"helm pull exited {proc.returncode}"
    return find_archive(release, [into]), ""


def with_namespace(doc: dict, namespace: str) -> dict:
    """The object as `helm install --namespace` creates it: namespaced kinds without one get the release's."""
    meta = doc.get("metadata") or {}
    if doc.get("kind") in CLUSTER_SCOPED or meta.get("namespace"):
        return doc
    return doc | {"metadata": meta | {"namespace": namespace}}


def render(helm: Path, release: Release, archive: Path, kube_version: str | None) -> list[dict]:
    """`helm template` of the release with the plan's values: its objects (no CRDs: checkov checks workloads)."""
    with tempfile.TemporaryDirectory(prefix="helm-values-") as tmp:
        values = Path(tmp) / "values.yaml"
        values.write_text(yaml.safe_dump(release.values, sort_keys=False), encoding="utf-8")
        cmd = [str(helm), "template", release.name, str(archive), "--namespace", release.namespace, "-f", str(values)]
        if kube_version:
            cmd += ["--kube-version", kube_version]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{release}: helm template failed: {proc.stderr.strip()[-2000:]}")
    docs = [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict) and d.get("kind")]
    return [with_namespace(d, release.namespace) for d in docs if not _test_hook(d)]


def _test_hook(doc: dict) -> bool:
    """A `helm test` hook: rendered by `helm template`, created only by `helm test`, never by an install (Helm
    docs, "Chart Tests"); install hooks (pre-install Jobs and the like) stay, the install runs them."""
    hook = ((doc.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", "")
    return "test" in [h.strip() for h in str(hook).split(",")] or "test-success" in str(hook)


@dataclass(frozen=True)
class Rendered:
    docs: dict[str, dict]  # file name -> object, for checkov
    not_scanned: list[str]  # one line per chart that could not be had


def rendered(
    manifests: dict[str, dict],
    charts: Path | None = None,
    helm: Path | None = None,
    kube_version: str | None = None,
    allow_pull: bool = False,
) -> Rendered:
    """Every HelmRelease of the plan rendered, or a line saying why not."""
    helm = helm or helm_binary()
    docs: dict[str, dict] = {}
    missing = []
    folders = [f for f in (charts, environment.helm_repository_cache(), pull_cache()) if f]
    refused: dict[str, str] = {}  # repository -> why its first pull failed: not asked again in this run
    for release in releases(manifests):
        if helm is None:
            missing.append(f"{release}: not scanned, no helm (`python3 -m go_binaries.build helm` builds it)")
            continue
        archive = find_archive(release, folders)
        why = "not in " + ", ".join(str(f) for f in folders)
        if archive is None and allow_pull and release.source in refused:
            why += f"; {refused[release.source]}"
        elif archive is None and allow_pull:
            archive, pulled = pull(helm, release, pull_cache())
            if pulled:
                why += f"; {pulled}"
                refused[release.source] = pulled
        if archive is None:
            missing.append(f"{release}: not scanned, archive not reachable ({why})")
            continue
        for i, doc in enumerate(render(helm, release, archive, kube_version)):
            name = (doc.get("metadata") or {}).get("name", "")
            docs[f"chart--{release.name}--{i:03d}-{doc['kind']}-{name}.yaml"] = doc
    return Rendered(docs, missing)
