"""Phase 1 of a rehearsal: render the stack's document with the project's own code, change only what cannot
exist on this machine (each change printed with its reason), build the stand-in model (CPU) or lay the roles
out on the GPUs and find the weights (GPU). Nothing runs yet."""

from __future__ import annotations

import copy
import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from ray_llm_eks.adapters import environment
from ray_llm_eks.adapters.stackfile import StackFileError
from ray_llm_eks.domain.core.errors import PROJECT, ConfigError
from ray_llm_eks.domain.serving import api_keys, model_table, role_view
from ray_llm_eks.domain.serving import engine_args as vllm_args
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import document_dict, parse_document
from rehearsal import ROOT, gpu, substitute, topology
from rehearsal.context import say
from rehearsal.logs import ROLE_HEADER
from rehearsal.tiny_model import STAND_IN_MAX_POSITIONS

CACHE = environment.cache_dir()


def stack_overrides(settings: list[str]) -> dict[str, object]:
    """`--set KEY=VALUE` (repeatable): stack keys for this run only, each VALUE as text (as `pulumi config set`
    stores it); a KEY without a namespace is the project's (`selectivePd=28` -> ray-llm-eks:selectivePd)."""
    overrides: dict[str, object] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise substitute.CannotRehearse(f"--set {setting}: KEY=VALUE, e.g. --set selectivePd=28")
        overrides[key if ":" in key else f"{PROJECT}:{key}"] = value
    return overrides


def engine_env(doc: dict, settings: list[str]) -> list[str]:
    """`--engine-env KEY=VALUE` (repeatable): an environment variable for every LLM engine of this run, set in each
    LLM config's runtime_env (what a stack's serve file would set); the lines saying so."""
    lines = []
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise substitute.CannotRehearse(f"--engine-env {setting}: KEY=VALUE, e.g. --engine-env UCX_LOG_LEVEL=info")

        def set_env(role: str, config: dict, key: str = key, value: str = value) -> str:
            env = config.setdefault("runtime_env", {}).setdefault("env_vars", {})
            line = f"{role}.runtime_env.env_vars.{key}: {env.get(key)!r} -> {value!r} (--engine-env)"
            env[key] = value
            return line

        lines += substitute.edit_roles(doc, "rehearsal", set_env).values()
    return lines


def engine_args(doc: dict, settings: list[str]) -> list[str]:
    """`--engine-arg ROLE.KEY=VALUE` (repeatable): one vLLM engine argument of one role for this run, VALUE read as
    YAML (`8192` a number, `true` a boolean), set over the rendered document's and every substitution's, and checked as
    the stack checks a serve file's (vLLM 0.26's arguments and their types); the lines saying so."""
    wanted: dict[str, dict[str, object]] = {}
    for setting in settings:
        target, sep, text = setting.partition("=")
        role, dot, key = target.partition(".")
        if not sep or not dot or not role or not text.strip() or not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
            raise substitute.CannotRehearse(
                f"--engine-arg {setting}: ROLE.KEY=VALUE, a top-level engine argument and a value, e.g. "
                "--engine-arg prefill.max_num_batched_tokens=8192"
            )
        try:
            wanted.setdefault(role, {})[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise substitute.CannotRehearse(f"--engine-arg {setting}: {text!r} is not a YAML value") from None
    if not wanted:
        return []
    roles = set(parse_document(doc, "rehearsal").roles)
    if unknown := sorted(set(wanted) - roles):
        raise substitute.CannotRehearse(
            f"--engine-arg: no role {', '.join(unknown)} in this serve config (its roles: {', '.join(sorted(roles))})"
        )

    def set_args(role: str, config: dict) -> list[str]:
        engine = config.setdefault("engine_kwargs", {})
        lines = []
        for key, value in wanted.get(role, {}).items():
            lines.append(f"{role}.engine_kwargs.{key}: {engine.get(key)!r} -> {value!r} (--engine-arg)")
            engine[key] = value
        if lines:
            vllm_args.check(f"--engine-arg {role}", engine)
        return lines

    try:
        edited = substitute.edit_roles(doc, "rehearsal", set_args)
    except ConfigError as exc:
        raise substitute.CannotRehearse(str(exc)) from None
    return [line for lines in edited.values() for line in lines]


def rehearsed_settings(stack: str, settings: list[str] | None = None):
    """The stack's Settings as this run renders them: its file with the `--set` keys over it."""
    from ray_llm_eks.adapters import stack as stack_adapter  # here: a GPU machine given --spec needs no stack adapter

    return stack_adapter.load_settings(stack_adapter.stack_file(stack, ROOT, overrides=stack_overrides(settings or [])))


def deployed_spec(stack: str, settings: list[str] | None = None) -> dict:
    """The RayService spec the program deploys for the stack (ray_llm_eks/domain/render/ray_service.py, the one
    builder)."""
    from ray_llm_eks.domain.render.ray_service import ray_service_spec

    return ray_service_spec(rehearsed_settings(stack, settings))


def kit_specs(stacks: str) -> dict[str, dict]:
    """A GPU kit's specs (tools/gpu/wheels.sh GPU_STACKS): comma-separated entries (commas inside a JSON value do not
    separate), each `dev` or `dev@selectivePd=1500@KEY=VALUE...`: the stack with those keys set over its file's
    values as `--set` sets them (JSON for a structured key), named by both (`dev.selectivePd-1500`: a value's letters
    and digits), so that each run of the kit says what it ran."""
    specs = {}
    for entry in _top_level_split(stacks):
        stack, *sets = entry.split("@")
        spec = deployed_spec(stack, sets)
        named = (item.partition("=") for item in sets)
        specs[".".join([stack, *(f"{key}-{re.sub(r'[^A-Za-z0-9]', '', value)}" for key, _, value in named)])] = spec
    return specs


def _top_level_split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def rendered_document(stack: str) -> dict:
    """The serveConfigV2 the stack's RayService gets."""
    return yaml.safe_load(deployed_spec(stack)["serveConfigV2"])


def key_checked(doc: dict) -> bool:
    """The document puts its apps behind the key-checking ingress (ray_llm_eks/domain/serving/api_keys.py)."""
    return any(
        ((app.get("args") or {}).get("ingress_cls_config") or {}).get("ingress_cls") == api_keys.INGRESS_CLS
        for app in doc.get("applications") or []
    )


# What stands here for each ConfigMap and Secret of the key check that the pods mount.
STAND_INS = {
    f"ConfigMap {api_keys.CONFIG_MAP_NAME}": "here the repository's ray_llm_eks/serve_ingress/, the files that "
    "ConfigMap carries",
    f"Secret {api_keys.SECRET_NAME}": "here a file with one random key made for this run, readable by this user only",
}


def key_check_here(
    local: substitute.LocalDocument, spec: dict, keys_dir: Path
) -> tuple[substitute.LocalDocument, list[str]]:
    """The key check with this machine's paths for the pods' two mounts (ray_llm_eks/domain/serving/api_keys.py
    on_this_machine), each move printed with the mount it stands for; a document without the key check is left as it
    is."""
    if not key_checked(local.document):
        return local, []
    keyed = parse_document(local.document, "rehearsal")
    here = document_dict(api_keys.on_this_machine(keyed, str(api_keys.SOURCES_DIR), str(keys_dir / api_keys.KEYS_FILE)))
    lines = substitute.moved_paths(local.document, here, substitute.pod_mounts(spec), STAND_INS)
    return replace(local, document=here), lines


def new_key(keys_dir: Path) -> str:
    """A random key for this run, in `keys_dir`/keys as the Secret's file (0600: the key is never printed)."""
    key = f"rk-{secrets.token_urlsafe(24)}"
    keys_dir.mkdir(parents=True, exist_ok=True)
    path = keys_dir / api_keys.KEYS_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as keys_file:
        keys_file.write(api_keys.key_file_content(key))
    return key


@dataclass(frozen=True)
class Prepared:
    local: substitute.LocalDocument
    api_key: str | None  # None: the stack's document checks no key
    keys_file: Path | None
    gpu: GpuRun | None = None  # TARGET=gpu


@dataclass(frozen=True)
class GpuRun:
    """What the GPU target decided before anything runs."""

    here: gpu.GpuHere
    emulate: gpu.Emulation | None
    nodes: list[gpu.NodeLayout]
    model: model_table.ModelSpec | None  # the served model's row of the fit check's table
    cpu_engines: bool  # the layout rehearsed with CPU engines (a dry run of the GPU target on a CPU machine)
    weights_from_hub: bool  # vLLM downloads the stack's model_source (HF_HUB_OFFLINE must stay unset)
    prediction_document: dict  # what the fit check predicts for: the rendered document with the engine
    # arguments the GPU engines run with, at the stack's own budget (gpu_memory_utilization as rendered)

    @property
    def budget_mib(self) -> int:
        """The GPU memory the fit check predicts against: the emulated GPU's, or this one's."""
        return self.emulate.memory_mib if self.emulate else self.here.total_mib


# --cpu-engines pretends this GPU (an H200 as CUDA reports it) for the substitutions it prints.
PRETENDED_GPU = gpu.GpuHere(count=1, name="H200 (pretended by --cpu-engines)", total_mib=143771, efa=False,
                            flashinfer=False)  # fmt: skip


def spec_of(path: Path) -> dict:
    """A RayService spec from a file (JSON or YAML): the spec itself, or a whole RayService manifest."""
    loaded = yaml.safe_load(path.read_text())
    return loaded.get("spec", loaded) if isinstance(loaded, dict) else {}


def served_model(doc: dict) -> model_table.ModelSpec | None:
    """The served model's row of ray_llm_eks/domain/serving/model_table.py's table (None: a model of the user's)."""
    model_id, source = next(iter(parse_document(doc, "rehearsal").roles.values())).model.id_and_source
    return model_table.KNOWN_MODELS.get(source) or model_table.KNOWN_MODELS.get(model_id)


def stand_in_family(doc: dict) -> str:
    """The stand-in for the served model's family (ray_llm_eks/domain/serving/model_table.py's table), or by its layer
    kinds."""
    spec = served_model(doc)
    if spec is None:
        return substitute.stand_in(None, False)
    return substitute.stand_in(spec.family.name if spec.family else None, spec.hybrid)


def model_dir(family: str) -> Path:
    return CACHE / "rehearsal-models" / family


def make_model(family: str, max_len: int) -> Path:
    out = model_dir(family)
    subprocess.run(
        [sys.executable, str(ROOT / "rehearsal" / "tiny_model.py"), family, str(out), str(max_len)], check=True
    )
    return out


def physical_cores(sys_node: Path = Path("/sys/devices/system/node/node0")) -> tuple[int, ...]:
    """The physical cores of the first NUMA node, each named by the lowest id of its hyper-thread siblings
    (as vllm/platforms/cpu.py discover_numa_topology names them)."""
    cores = set()
    for cpu in sys_node.glob("cpu[0-9]*"):
        try:
            siblings = (cpu / "topology" / "thread_siblings_list").read_text().strip()
        except OSError:
            siblings = cpu.name[3:]
        ids = [int(x) for part in siblings.split(",") for x in part.split("-")[:1]]
        cores.add(min(ids))
    return tuple(sorted(cores)) or tuple(sorted(os.sched_getaffinity(0)))


def nixl_pinned_core(sys_node: Path = Path("/sys/devices/system/node/node0")) -> int:
    """The core vLLM 0.26's NixlConnector pins a CPU engine's main thread to: the highest physical core of the
    first NUMA node (vLLM 0.26.0 nixl/base_worker.py NixlBaseConnectorWorker.__init__)."""
    return max(physical_cores(sys_node))


def stack_run_dir(stack: str) -> Path:
    return CACHE / "rehearsal-runs" / stack


def _max_len(doc: dict) -> int:
    """The longest context any role runs the stand-in at: the stand-in is built to hold it."""
    views = role_view.views_of(parse_document(doc, "rehearsal").roles, lambda model_id, source: STAND_IN_MAX_POSITIONS)
    return max(view.max_model_len for view in views.values())


def _cpu(rendered: dict, port: int, keep_pools: bool = False) -> substitute.LocalDocument:
    family = stand_in_family(rendered)
    cores = physical_cores()
    local = substitute.for_cpu(
        rendered, str(model_dir(family)), family, port, nixl_core=max(cores), cores=cores, keep_pools=keep_pools
    )
    make_model(family, _max_len(rendered))
    return local


def _weights(args, rendered: dict, device: str) -> tuple[str | None, str]:
    """Where the GPU engines load weights from, and why: --weights DIR, --random-weights (built here), or the
    stack's own model_source (None)."""
    if args.weights:
        if not (args.weights / "config.json").exists():
            raise substitute.CannotRehearse(f"--weights {args.weights}: no config.json there (a model directory)")
        return str(args.weights.resolve()), "a local copy of the weights (--weights)"
    if not args.random_weights:
        return None, ""
    model_id = parse_document(rendered, "rehearsal").model_id
    config = args.model_config or ROOT / "rehearsal" / "model_configs" / f"{model_id.replace('/', '--')}.json"
    if not config.exists():
        raise substitute.CannotRehearse(
            f"--random-weights: no config.json for {model_id} at {config} (give --model-config FILE: the model's "
            "config.json)"
        )
    out = CACHE / "gpu-models" / f"{model_id.replace('/', '--')}-random"
    layers = getattr(args, "layers", None)
    if layers:
        config = few_layers(config, layers, CACHE / "gpu-models")
        out = out.with_name(f"{out.name}-{layers}-layers")
    subprocess.run(
        [sys.executable, str(ROOT / "rehearsal" / "gpu_model.py"), str(config), str(out), device], check=True
    )
    arch = (yaml.safe_load(config.read_text()).get("architectures") or ["?"])[0]
    depth = f", its first {layers} layers only (--layers: a mechanism run, not the model's figures)" if layers else ""
    return str(out), f"random bf16 weights of the real {arch}, built here from {config.name} (--random-weights){depth}"


def few_layers(config_path: Path, layers: int, folder: Path) -> Path:
    """The model's config.json with its first `layers` layers only (their kinds as the model orders them: Qwen3.5's
    first 8 are 6 Gated DeltaNet and 2 full attention, as in the whole model), written into `folder`."""
    from measure.hf_model_spec import text_config, with_layers

    config = json.loads(config_path.read_text())
    depth = int(text_config(config).get("num_hidden_layers", 0))
    if not 1 <= layers <= depth:
        raise substitute.CannotRehearse(f"--layers {layers}: between 1 and {depth}")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{config_path.stem}-{layers}-layers.json"
    out.write_text(json.dumps(with_layers(config, layers), indent=2) + "\n")
    return out


def _gpu(args, rendered: dict, port: int, overrides: list[str]) -> tuple[substitute.LocalDocument, GpuRun, list[str]]:
    """The document as this GPU machine runs it: the roles laid out on its GPUs, the substitutions (rehearsal.gpu)."""
    from rehearsal import gpu_probe

    model = served_model(rendered)
    here = PRETENDED_GPU if args.cpu_engines else gpu_probe.probe()
    emulate = gpu.emulation(args.emulate) if args.emulate else None
    nodes, layout_line = gpu.layout(gpu.role_needs(rendered), here.count)
    weights, why = _weights(args, rendered, "cpu" if args.cpu_engines else "cuda")
    family = stand_in_family(rendered)
    local = gpu.for_gpus(
        rendered, here, family=family, hybrid=bool(model and model.hybrid), port=port, weights=weights,
        weights_why=why, emulate=emulate, nodes_on_one_host=len(nodes), eager=getattr(args, "eager", False),
    )  # fmt: skip
    lines = [f"GPUs here: {here.count} x {here.name}, {here.total_mib} MiB each as CUDA reports it"
             + ("" if here.efa else "; no EFA") + ("" if here.flashinfer else "; no FlashInfer")]  # fmt: skip
    lines += local.substitutions
    # Before the prediction: the fit check predicts for the engine arguments the run deploys.
    lines += engine_args(local.document, overrides)
    if weights is None:
        lines.append("weights: the stack's model_source, downloaded by vLLM (needs the hub; HF_TOKEN for a gated one)")
    lines.append(f"Ray: {layout_line}; NIXL side channels from Ray Serve LLM's own bases (prefill 20000, decode 22000)")
    predicted = _prediction_document(rendered, local.document)
    if args.cpu_engines:
        cpu_local = _cpu(local.document, port, keep_pools=True)
        engine_args(cpu_local.document, overrides)  # over the CPU engines' own substitutions too (said above)
        lines += [f"CPU engines (--cpu-engines: this layout, rehearsed on the CPU): {line}"
                  for line in cpu_local.substitutions]  # fmt: skip
        local = cpu_local
    # A few-layer variant is not the table's model: its memory lines have no prediction to meet.
    fitted = None if getattr(args, "layers", None) else model
    return local, GpuRun(here, emulate, nodes, fitted, args.cpu_engines, weights is None, predicted), lines


def _prediction_document(rendered: dict, deployed: dict) -> dict:
    """The rendered document with the deployed engine arguments but its own budget and model source: the fit
    check predicts for the GPU being emulated, which the deployed budget stands for."""
    doc = copy.deepcopy(rendered)
    ran = parse_document(deployed, "rehearsal").roles

    def deployed_engine(role: str, config: dict) -> None:
        own = config.setdefault("engine_kwargs", {})
        budget = own.get("gpu_memory_utilization")
        own.update(to_dict(ran[role].engine))
        if budget is None:
            own.pop("gpu_memory_utilization", None)
        else:
            own["gpu_memory_utilization"] = budget

    substitute.edit_roles(doc, "rehearsal", deployed_engine)
    return doc


def prepare(args, checks, port: int) -> Prepared | None:
    """Render, substitute (printed), build the stand-in or find the weights, make this run's key; then each
    selected check's own changes (printed). None: a kv_role mistake (printed under ROLE_HEADER)."""
    if args.spec and args.set:
        raise substitute.CannotRehearse("--set changes the stack's keys before rendering: not with --spec FILE")
    try:
        spec = spec_of(args.spec) if args.spec else deployed_spec(args.stack, args.set)
    except (ConfigError, StackFileError) as exc:
        raise substitute.CannotRehearse(str(exc)) from None
    rendered = yaml.safe_load(spec["serveConfigV2"])
    overrides = getattr(args, "engine_arg", None) or []
    gpu_run = None
    if args.target == "gpu":
        local, gpu_run, lines = _gpu(args, rendered, port, overrides)
    else:
        local = _cpu(rendered, port)
        lines = [*local.substitutions, *engine_args(local.document, overrides)]
    keys_dir = stack_run_dir(args.stack) / "api-keys"
    local, moved = key_check_here(local, spec, keys_dir)
    lines += moved
    kind = "prefill/decode" if local.pd else "collocated"
    target = "" if gpu_run is None else " (GPU target" + (", CPU engines)" if gpu_run.cpu_engines else ")")
    say(f"Stack {args.stack}{target}: {kind}, model {local.model_ids[0]}; substitutions:")
    for key, value in stack_overrides(args.set).items():
        say(f"  - stack key {key} = {value!r} for this run (--set), over Pulumi.{args.stack}.yaml's")
    for line in lines:
        say(f"  - {line}")
    if gpu_run is None:
        say("  - Ray: one node on 127.0.0.1, CPUs only (NIXL side channel on 127.0.0.1; UCX picks its transports)")
    if local.hybrid and (gpu_run is None or gpu_run.cpu_engines):
        say("  - process env: AMX hidden from vLLM's CPU platform (rehearsal/amx_hidden/sitecustomize.py)")
    if local.pd:
        say(f"  - process env: VLLM_LOGGING_CONFIG_PATH (vLLM's format, plus DEBUG for {topology.PULL_WORKER_LOGGER}"
            ": it names the prefill engine of each KV read)")  # fmt: skip
    for line in engine_env(local.document, getattr(args, "engine_env", None) or []):
        say(f"  - {line}")
    for mutation in args.mutate:
        say(f"  ! {substitute.mutate(local.document, mutation)}")
    for check in checks:
        if check.prepare is not None:
            try:
                lines = check.prepare(local, args)
            except ValueError as exc:
                raise substitute.CannotRehearse(str(exc)) from None
            for line in lines:
                say(f"  - {line}")
    if wrong_roles := substitute.role_mistakes(local.document):
        say(f"\nREHEARSAL FAILED: kv_role on the wrong side\n{ROLE_HEADER}")
        for line in wrong_roles:
            say(f"  {line}")
        return None
    if not key_checked(local.document):
        say("  (the stack's document checks no API key: the smoke sends none)")
        return Prepared(local, None, None, gpu_run)
    key = new_key(keys_dir)
    say(f"  - API key: a random one for this run, in {keys_dir / api_keys.KEYS_FILE} (the smoke sends it)")
    return Prepared(local, key, keys_dir / api_keys.KEYS_FILE, gpu_run)
