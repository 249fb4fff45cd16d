"""The checks of the entries that copy Ray's or KubeRay's behaviour or use their private API: KubeRay's
cluster hash (Go module), and Ray Serve LLM's arguments, PD builder, ingress, routing, autoscaler patch and
worker setup hook (the Ray installed in .venv, with the vLLM functions some of them rest on)."""

from __future__ import annotations

import ast
import re

from tools.upstream.context import Context, fingerprints, go_versions, pinned_ray, pinned_vllm
from tools.upstream.sources import GoModule, Wheel, class_fields, pinned, python_symbol


def check_kuberay_cluster_hash(ctx: Context) -> list[str]:
    operator = ctx.source(GoModule, "github.com/ray-project/kuberay/ray-operator", go_versions()["kuberay"])
    symbols = {
        "controllers/ray/rayservice_controller.go": ["shouldUpdateCluster"],
        "controllers/ray/utils/util.go": ["GenerateHashWithoutReplicasAndWorkersToDelete"],
    }
    return fingerprints("kuberay-cluster-hash", ctx, operator, symbols, "go")


def check_ray_serve_vllm_logging(ctx: Context) -> list[str]:
    """The worker setup hook's chain (docs/faults-and-upgrades.md): Ray's private env var keeps its name, and
    the functions that set up the hook, Serve's replica logger, Ray Serve LLM's env merge, vLLM's NIXL import
    and NIXL's logging setup are as we read them."""
    from ray_llm_eks.domain.serving import api_keys

    ray = pinned_ray(ctx)
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
    problems += fingerprints(entry, ctx, pinned_vllm(ctx), vllm_symbols, "python")
    return problems + fingerprints(entry, ctx, nixl, {"nixl_cu13/logging.py": ["setup_logging"]}, "python")


def check_ray_pd_rules(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.serving import serve_app

    ray = pinned_ray(ctx)
    pd_path = "ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py"
    pd = ray.read(pd_path)
    collocated = ray.read("ray/llm/_internal/serve/core/ingress/builder.py")
    deprecated = {"proxy_cls_config", "proxy_deployment_config"}  # accepted and ignored: we refuse them
    theirs = {
        serve_app.PD_IMPORT: class_fields(pd, "PDServingArgs") - deprecated,
        serve_app.COLLOCATED_IMPORT: class_fields(collocated, "LLMServingArgs"),
    }
    problems = [
        f"{app}: Ray {ray.version} takes {sorted(fields)}, ray_llm_eks/domain/serving/serve_app.py APP_ARGS "
        f"{sorted(ours)}"
        for app, fields in theirs.items()
        if fields != (ours := serve_app.APP_ARGS[app])
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
    ray = pinned_ray(ctx)
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
        + fingerprints(entry, ctx, pinned_vllm(ctx), vllm, "python")
    )


def check_ray_first_chunk(ctx: Context) -> list[str]:
    """The LLM server methods first_chunk.py overrides and calls, the batching it replaces, and the builder that takes
    a config's server_cls and names the deployment after it, as we read them."""
    symbols = {
        "ray/llm/_internal/serve/core/server/llm_server.py": [
            "LLMServer._run_request",
            "LLMServer._batch_output_stream",
            "LLMServer._get_batch_interval_ms",
        ],
        "ray/llm/_internal/serve/utils/batcher.py": ["Batcher.stream"],
        "ray/llm/_internal/serve/core/server/builder.py": ["build_llm_deployment"],
        "ray/llm/_internal/serve/core/configs/llm_config.py": ["LLMConfig.validate_server_cls"],
    }
    return fingerprints("ray-first-chunk", ctx, pinned_ray(ctx), symbols, "python")


def check_ray_openai_ingress(ctx: Context) -> list[str]:
    ray = pinned_ray(ctx)
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
    return fingerprints("ray-kuberay-node-provider", ctx, pinned_ray(ctx), symbols, "python")


def check_ray_llm_config(ctx: Context) -> list[str]:
    ray = pinned_ray(ctx)
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


def check_ray_request_routing(ctx: Context) -> list[str]:
    from ray_llm_eks.domain.serving import routing

    ray = pinned_ray(ctx)
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
        + fingerprints(entry, ctx, pinned_vllm(ctx), vllm, "python")
    )
