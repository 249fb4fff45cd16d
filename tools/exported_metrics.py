"""The engine and Serve metric names the pinned vLLM and Ray export, as Prometheus sees them under Ray Serve LLM,
read from their sources (not guessed from names): ray_llm_eks/observability/exported-metrics.txt, which the dashboard
test holds every panel to and `make check-upstream` re-derives (UPGRADING.md `exported-metric-names`).

vLLM 0.26 declares each metric as `vllm:<name>` through its stat logger's `_counter_cls` / `_gauge_cls` /
`_histogram_cls` (vllm/v1/metrics/loggers.py, the KV connectors' metrics, spec decoding, perf), or as a
name constant mapped to an Offloading{Counter,Gauge,Histogram}Metadata (KV offloading); Ray Serve LLM swaps
those classes for Ray's (vllm/v1/metrics/ray_wrappers.py RayPrometheusStatLogger), which sanitise the name
(`vllm:x` -> `vllm_x`), and Ray adds `ray_`. Ray Serve 2.58 declares its own with ray.util.metrics
Counter/Gauge/Histogram("serve_<name>"). Ray's Prometheus export names a counter `<name>_total` and a
histogram `<name>_bucket`, `_sum`, `_count`. The code the pods run beside Ray's (ray_llm_eks/serve_ingress/: selective
PD's decode server) declares its own through ray.serve.metrics Counter/Gauge/Histogram(NAME), read the same way.

    .venv/bin/python -m tools.exported_metrics VLLM_SITE_PACKAGES   # rewrite the list (Ray: the .venv's)
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "ray_llm_eks" / "observability" / "exported-metrics.txt"
# Where the pinned packages declare the metrics Ray Serve LLM exports (vLLM's own API server, which Serve does
# not run, registers others with prometheus_client directly: not exported there).
VLLM_DIRS = ("vllm/v1/", "vllm/distributed/kv_transfer/")
RAY_DIRS = ("ray/serve/",)
# Ours, in this repository: any name (a metric of ours has no common prefix), so only calls of a class named
# Counter, Gauge or Histogram count (ray_llm_eks/serve_ingress/ calls nothing else of those names).
OWN_DIRS = ("ray_llm_eks/serve_ingress/",)
OWN_PREFIX = ""
KINDS = ("counter", "gauge", "histogram")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _kind(call: ast.expr) -> str | None:
    """counter, gauge or histogram from the called name (_counter_cls, Counter, OffloadingGaugeMetadata, ...)."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    called = (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")).lower()
    return next((k for k in KINDS if k in called), None)


def _constants(tree: ast.Module, prefix: str) -> dict[tuple[str | None, str], str]:
    """(class or None, name) -> a string constant starting with `prefix`, assigned at module or class level."""
    found = {}
    scopes: list[tuple[str | None, list[ast.stmt]]] = [(None, tree.body)]
    scopes += [(n.name, n.body) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for scope, body in scopes:
        for stmt in body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
                value = stmt.value.value
                if isinstance(value, str) and value.startswith(prefix):
                    found.update({(scope, t.id): value for t in stmt.targets if isinstance(t, ast.Name)})
    return found


class _Declarations(ast.NodeVisitor):
    def __init__(self, constants: Mapping[tuple[str | None, str], str], prefix: str):
        self.constants, self.prefix = constants, prefix
        self.loops: list[ast.For] = []
        self.found: dict[str, str] = {}

    def resolve(self, node: ast.expr | None) -> list[str]:
        if isinstance(node, ast.JoinedStr):  # f"serve_num_{protocol_name}_requests": `*` for each field
            text = "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
            return [text] if text.startswith(self.prefix) else []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value] if node.value.startswith(self.prefix) else []
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            value = self.constants.get((node.value.id, node.attr))
            return [value] if value else []
        if isinstance(node, ast.Name):
            value = self.constants.get((None, node.id))
            return [value] if value else self._loop_values(node.id)
        return []

    def _loop_values(self, name: str) -> list[str]:
        """`for name, doc in (("vllm:a", "..."), ...)`: the literals bound to `name`."""
        for loop in reversed(self.loops):
            targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
            at = next((i for i, t in enumerate(targets) if isinstance(t, ast.Name) and t.id == name), None)
            if at is None or not isinstance(loop.iter, (ast.Tuple, ast.List)):
                continue
            items = [e.elts[at] if isinstance(e, ast.Tuple) else e for e in loop.iter.elts]
            return [v for item in items for v in self.resolve(item)]
        return []

    def add(self, names: Iterable[str], kind: str | None) -> None:
        for name in names:
            if kind:
                self.found[name] = kind

    def visit_For(self, node: ast.For) -> None:
        self.loops.append(node)
        self.generic_visit(node)
        self.loops.pop()

    def visit_Call(self, node: ast.Call) -> None:
        if kind := _kind(node):
            named = next((k.value for k in node.keywords if k.arg == "name"), node.args[0] if node.args else None)
            self.add(self.resolve(named), kind)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:  # {NAME: OffloadingCounterMetadata(...)}
        for key, value in zip(node.keys, node.values, strict=True):
            self.add(self.resolve(key), _kind(value))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:  # metrics[NAME] = OffloadingHistogramMetadata(...)
        for target in node.targets:
            if isinstance(target, ast.Subscript):
                self.add(self.resolve(target.slice), _kind(node.value))
        self.generic_visit(node)


def declared(sources: Mapping[str, str], prefix: str) -> dict[str, str]:
    """name -> kind of every metric the sources (path -> text) declare under `prefix`."""
    trees = [ast.parse(text) for text in sources.values()]
    constants = {k: v for tree in trees for k, v in _constants(tree, prefix).items()}  # names cross modules
    found: dict[str, str] = {}
    for tree in trees:
        visitor = _Declarations(constants, prefix)
        visitor.visit(tree)
        found.update(visitor.found)
    return found


def prometheus_names(*declarations: Mapping[str, str]) -> list[str]:
    """Every series name Prometheus gets: `ray_` + the sanitised name + the kind's suffixes."""
    names = []
    for name, kind in [item for declared_ in declarations for item in declared_.items()]:
        base = "ray_" + re.sub(r"[^a-zA-Z0-9_*]", "_", name)
        names += [base + suffix for suffix in SUFFIXES[kind]]
    return sorted(set(names))


def sources_under(root: Path, dirs: tuple[str, ...]) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for d in dirs
        for p in sorted((root / d).rglob("*.py"))
        if "/tests/" not in str(p)
    }


def own_sources() -> dict[str, str]:
    return sources_under(ROOT, OWN_DIRS)


def derive(
    vllm_sources: Mapping[str, str], ray_sources: Mapping[str, str], own: Mapping[str, str] | None = None
) -> list[str]:
    """The list's names: vLLM's and Ray Serve's, and ours (`own`: ray_llm_eks/serve_ingress/'s sources, by default read
    here)."""
    own = own_sources() if own is None else own
    return prometheus_names(declared(vllm_sources, "vllm:"), declared(ray_sources, "serve_"), declared(own, OWN_PREFIX))


def read_list(path: Path = LIST) -> set[str]:
    return {line for line in path.read_text().splitlines() if line and not line.startswith("#")}


def exported(name: str, names: Iterable[str]) -> bool:
    """`name` is one of `names` (a `*` in one stands for a field of an f-string name: the protocol, ...)."""
    return any(fnmatch.fnmatchcase(name, n) for n in names)


HEADER = (
    "# Engine (vLLM) and Serve metric names Ray Serve LLM exports, as Prometheus sees them, and those of our code\n"
    "# the pods run (ray_llm_eks/serve_ingress/): tools/exported_metrics.py derives them from the pinned vLLM and "
    "Ray sources\n"
    "# and ours; `make check-upstream` re-derives and compares.\n"
    "# A `*` stands for a field of an f-string name (Serve's protocol: http, grpc).\n"
)


def main(argv: list[str]) -> int:
    import ray

    if len(argv) != 1:
        print("usage: python -m tools.exported_metrics VLLM_SITE_PACKAGES (where the pinned vllm is)", file=sys.stderr)
        return 2
    names = derive(sources_under(Path(argv[0]), VLLM_DIRS), sources_under(Path(ray.__file__).parent.parent, RAY_DIRS))
    LIST.write_text(HEADER + "\n".join(names) + "\n")
    print(f"wrote {LIST.relative_to(ROOT)} ({len(names)} names)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
