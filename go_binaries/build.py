"""Build, once, the real binaries the e2e and the rehearsal run: Prometheus and promtool, etcd, the
Kubernetes control plane, the KubeRay operator, Karpenter with its kwok cloud provider, the Pulumi CLI,
the Pulumi Kubernetes provider and the Pulumi YAML language host, and helm (`make policy` renders the stack's
charts with it).

Everything is built from the Go module proxy into a cache OUTSIDE the repository
(``$RAY_LLM_EKS_E2E_CACHE``, default ``e2e`` under the cache root of ray_llm_eks/adapters/environment.py), one directory
per component and version, stamped with a hash of what built it; a second run is a no-op.
Go's own caches (GOMODCACHE, GOCACHE) are left where Go puts them (``go env``).

The wrapper modules in go_binaries/wrappers/ are ours; the versions and why each wrapper exists
are in their go.mod files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ray_llm_eks.adapters import environment  # stdlib only, as this module must be

HERE = Path(__file__).resolve().parent
WRAPPERS = HERE / "wrappers"

# kube-prometheus-stack 88.5.x deploys Prometheus v3.14.0 (values.yaml prometheus.prometheusSpec.image.tag
# v3.14.0-distroless); its Go module tags v0.3XX.Y are Prometheus v3.XX.Y.
PROMETHEUS_VERSION = "v3.14.0"
PROMETHEUS_MODULE_VERSION = "v0.314.0"
KUBE_VERSION = "v1.35.4"  # EKS 1.35 (standard support to 2027-03-27); newest 1.35 the proxy serves
ETCD_VERSION = "v3.6.5"  # the etcd that k8s.io/kubernetes v1.35.4's go.mod requires
# KubeRay v1.7.0: the proxy serves its .info/.mod but refuses its .zip ("This module
# version is not available"), and its tag commit as a pseudo-version too; v1.6.2 is the
# newest it serves whole, so the operator AND its CRDs come from v1.6.2.
KUBERAY_VERSION = "v1.6.2"
PULUMI_VERSION = "v3.274.1"  # >= the SDK pin pulumi==3.272.0; newest pkg/v3 in the proxy's tested list
# provider/v4 is served only at this pseudo-version: the commit tagged v4.25.0.
PULUMI_KUBERNETES_MODULE_VERSION = "v4.0.0-20260115033456-f47bc2d6f199"
PULUMI_KUBERNETES_VERSION = "4.25.0"
# Karpenter's core module at the chart's version (offline/schemas/charts, karpenter 1.14.1): the AWS provider's
# v1.14.1 go.mod requires sigs.k8s.io/karpenter at the commit tagged v1.14.1. Its kwok/ cloud provider stands
# in for EC2 (e2e/karpenter.py).
KARPENTER_VERSION = "v1.14.1"
# The newest pulumi-yaml the proxy serves (v1.39+ refused); built against the CLI's pkg/v3 (wrappers/pulumi-yaml).
PULUMI_YAML_VERSION = "v1.38.1"
# helm for `make policy`'s `helm template` of the stack's charts (offline/chart_render.py): the newest v3 the proxy
# serves that go get accepts (v3.22.0 is served but not approved); it brings the k8s.io modules at v0.36.2.
HELM_VERSION = "v3.21.4"


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    # (Go package, output file name) pairs, built in one `go build` per pair list.
    packages: tuple[tuple[str, str], ...]
    wrapper: str | None = None  # directory under go_binaries/wrappers/, or None for `go install pkg@version`
    ldflags: str = "-s -w"
    tags: str = ""  # go build -tags
    # files copied from a module in GOMODCACHE: (module@version, path in module, dest name)
    module_files: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)


PROMETHEUS = Component(
    "prometheus",
    PROMETHEUS_VERSION,
    (
        ("github.com/prometheus/prometheus/cmd/prometheus", "prometheus"),
        ("github.com/prometheus/prometheus/cmd/promtool", "promtool"),
    ),
    wrapper="prometheus",
    # What Prometheus's own build sets (.promu.yml: netgo; ldflags -X .../common/version.*). remove_all_sd
    # leaves out the cloud service discoveries (plugins/plugin_*.go), so their SDKs are neither downloaded nor
    # compiled; file and static discovery stay (plugins/minimum.go). builtinassets is left out: the module zip
    # has no built web UI (the API answers, the UI pages do not).
    tags="netgo,remove_all_sd",
    ldflags=(
        f"-s -w -X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION.lstrip('v')}"
        f" -X github.com/prometheus/common/version.Revision={PROMETHEUS_MODULE_VERSION}"
        " -X github.com/prometheus/common/version.Branch=HEAD"
    ),
)

# In build order: Prometheus first (the rehearsal, which runs while CI's build goes on, needs it earliest).
COMPONENTS: tuple[Component, ...] = (
    PROMETHEUS,
    Component(
        "etcd",
        ETCD_VERSION,
        (("go.etcd.io/etcd/server/v3", "etcd"),),
        wrapper="etcd",
    ),
    Component(
        "kube",
        KUBE_VERSION,
        tuple(
            (f"k8s.io/kubernetes/cmd/{b}", b) for b in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
        ),
        wrapper="kube",
        # What `make` in kubernetes sets (hack/lib/version.sh); the server reports it on /version.
        ldflags=(
            f"-s -w -X k8s.io/component-base/version.gitVersion={KUBE_VERSION}"
            " -X k8s.io/component-base/version.gitMajor=1"
            f" -X k8s.io/component-base/version.gitMinor={KUBE_VERSION.split('.')[1]}"
        ),
    ),
    Component(
        "kuberay-operator",
        KUBERAY_VERSION,
        (("github.com/ray-project/kuberay/ray-operator", "ray-operator"),),
        module_files=tuple(
            (
                f"github.com/ray-project/kuberay/ray-operator@{KUBERAY_VERSION}",
                f"config/crd/bases/ray.io_{kind}.yaml",
                f"crds/ray.io_{kind}.yaml",
            )
            for kind in ("rayclusters", "rayjobs", "rayservices", "raycronjobs")
        ),
    ),
    Component(
        "pulumi",
        PULUMI_VERSION,
        (("github.com/pulumi/pulumi/pkg/v3/cmd/pulumi", "pulumi"),),
        wrapper="pulumi",
        # What pulumi's own build sets (pkg/Makefile: -X .../sdk/v3/go/common/version.Version).
        ldflags=f"-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={PULUMI_VERSION}",
    ),
    Component(
        "pulumi-kubernetes",
        PULUMI_KUBERNETES_VERSION,
        (("ray-llm-eks/go_binaries/wrappers/pulumi-kubernetes", "pulumi-resource-kubernetes"),),
        wrapper="pulumi-kubernetes",
        ldflags=(
            f"-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version={PULUMI_KUBERNETES_VERSION}"
        ),
        module_files=tuple(
            (
                f"github.com/pulumi/pulumi-kubernetes/provider/v4@{PULUMI_KUBERNETES_MODULE_VERSION}",
                f"cmd/pulumi-resource-kubernetes/{f}",
                f,
            )
            for f in ("schema.json", "terraform-mapping.json")
        ),
    ),
    Component(
        "karpenter-kwok",
        KARPENTER_VERSION,
        (("sigs.k8s.io/karpenter/kwok", "karpenter-kwok"),),
        # The release in its logs ("discovered karpenter version"; the core's kwok build sets nothing and logs
        # "unspecified", pkg/operator/operator.go Version). Its go.mod has no replace directive: `go install
        # pkg@version` builds it as released.
        ldflags=f"-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version={KARPENTER_VERSION}",
        # The CRDs its controllers watch, beside the NodePool and EC2NodeClass CRDs vendored in
        # offline/schemas/ (the AWS chart's NodePool, which the e2e installs, adds only label-domain rules).
        module_files=tuple(
            (f"sigs.k8s.io/karpenter@{KARPENTER_VERSION}", path, f"crds/{path.rsplit('/', 1)[1]}")
            for path in (
                "pkg/apis/crds/karpenter.sh_nodeclaims.yaml",
                "pkg/apis/crds/karpenter.sh_nodeoverlays.yaml",
                "pkg/apis/crds/autoscaling.x-k8s.io_capacitybuffers.yaml",
                "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
            )
        ),
    ),
    Component(
        "pulumi-yaml",
        PULUMI_YAML_VERSION,
        (("github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml", "pulumi-language-yaml"),),
        wrapper="pulumi-yaml",
        # What pulumi-yaml's own build sets (Makefile: -X .../pkg/version.Version).
        ldflags=f"-s -w -X github.com/pulumi/pulumi-yaml/pkg/version.Version={PULUMI_YAML_VERSION}",
    ),
    Component(
        "helm",
        HELM_VERSION,
        (("helm.sh/helm/v3/cmd/helm", "helm"),),
        # What helm's own Makefile sets: its version, and the Kubernetes version `helm template` assumes without
        # --kube-version (client-go v0.36 -> 1.36; chartutil and lint/rules otherwise say 1.20).
        ldflags=(
            f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
            + "".join(
                f" -X helm.sh/helm/v3/pkg/{pkg}.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/{pkg}.k8sVersionMinor=36"
                for pkg in ("chartutil", "lint/rules")
            )
        ),
    ),
)


def cache_root() -> Path:
    env = os.environ.get("RAY_LLM_EKS_E2E_CACHE")
    if env:
        return Path(env)
    return environment.cache_dir() / "e2e"


def component_dir(c: Component) -> Path:
    return cache_root() / f"{c.name}-{c.version}"


def _recipe_hash(c: Component) -> str:
    # Tags only where a component has some: the stamps of components built before tags existed stay valid.
    recipe = [c.name, c.version, c.packages, c.ldflags, c.module_files] + ([c.tags] if c.tags else [])
    h = hashlib.sha256(json.dumps(recipe).encode())
    if c.wrapper:
        for f in sorted((WRAPPERS / c.wrapper).iterdir()):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def _go(args: list[str], cwd: Path | None, env: dict[str, str], attempts: int = 3) -> None:
    """Run go; again when it fails: a module download under a loaded, niced build once failed with "TLS
    handshake timeout" (a compile error fails again at once, from the build cache)."""
    print("  $ go " + " ".join(args), flush=True)
    for attempt in range(1, attempts + 1):
        try:
            subprocess.run(["go", *args], cwd=cwd, env=env, check=True)
            return
        except subprocess.CalledProcessError:
            if attempt == attempts:
                raise
            print(f"  go failed (attempt {attempt} of {attempts}); again", flush=True)


def _module_dir(mod_at_version: str, env: dict[str, str]) -> Path:
    out = subprocess.run(
        ["go", "mod", "download", "-json", mod_at_version], env=env, check=True, capture_output=True, text=True
    )
    return Path(json.loads(out.stdout)["Dir"])


def build(c: Component) -> float:
    """Build one component unless its stamp matches; return the seconds spent."""
    out = component_dir(c)
    stamp = out / ".built"
    want = _recipe_hash(c)
    if stamp.is_file() and stamp.read_text() == want:
        return 0.0
    start = time.monotonic()
    print(f"building {c.name} {c.version} -> {out}", flush=True)
    if out.exists():
        shutil.rmtree(out)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    # The machine's own Go settings (CGO as `go env` says); -buildvcs=false: the modules come as zips.
    env = dict(os.environ, GOFLAGS="-buildvcs=false -mod=readonly")
    tags = ["-tags", c.tags] if c.tags else []
    for pkg, binary in c.packages:
        if c.wrapper:
            _go(["build", *tags, "-ldflags", c.ldflags, "-o", str(tmp / binary), pkg], WRAPPERS / c.wrapper, env)
        else:
            genv = dict(env, GOBIN=str(tmp), GOFLAGS="-buildvcs=false")
            _go(["install", *tags, "-ldflags", c.ldflags, f"{pkg}@{c.version}"], None, genv)
            built = tmp / pkg.rsplit("/", 1)[-1]
            if built.name != binary:
                built.rename(tmp / binary)
    for mod, path, dest in c.module_files:
        src = _module_dir(mod, env) / path
        (tmp / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, tmp / dest)
    (tmp / ".built").write_text(want)
    tmp.rename(out)
    secs = time.monotonic() - start
    print(f"built {c.name} {c.version} in {secs:.0f} s", flush=True)
    return secs


def bin_dirs() -> dict[str, Path]:
    return {c.name: component_dir(c) for c in COMPONENTS}


def main(argv: list[str]) -> int:
    if shutil.which("go") is None:
        print("e2e build: the `go` command is not on PATH (Go 1.26 is needed)", file=sys.stderr)
        return 2
    wanted = set(argv) or {c.name for c in COMPONENTS}
    unknown = wanted - {c.name for c in COMPONENTS}
    if unknown:
        print(f"e2e build: unknown component(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    start = time.monotonic()
    for c in COMPONENTS:
        if c.name in wanted:
            build(c)
    print(f"e2e build: all components ready under {cache_root()} ({time.monotonic() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
