"""The checks of the entries that copy vLLM's behaviour: its argument table and defaults, how it sizes the KV
cache and splits heads, its NIXL connector, its KV failure path and how it runs on a CPU (the pinned wheel)."""

from __future__ import annotations

import ast
import json

from tools.upstream.context import Context, fingerprints, pinned_ray, pinned_vllm
from tools.upstream.sources import python_symbol


def check_vllm_engine_args(ctx: Context) -> list[str]:
    from tools import extract_vllm_engine_args as extractor

    wheel = pinned_vllm(ctx)
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

    text = pinned_vllm(ctx).read("vllm/config/cache.py")
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

    vllm = pinned_vllm(ctx)
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
    return fingerprints("vllm-tensor-parallel-heads", ctx, pinned_vllm(ctx), symbols, "python")


def check_vllm_nixl_behaviour(ctx: Context) -> list[str]:
    symbols = {
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py": ["NixlBaseConnector.__init__"],
        "vllm/v1/core/sched/scheduler.py": ["Scheduler.__init__"],
        "vllm/distributed/kv_transfer/kv_connector/utils.py": ["copy_kv_blocks"],
    }
    return fingerprints("vllm-nixl-behaviour", ctx, pinned_vllm(ctx), symbols, "python")


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
    problems = fingerprints(entry, ctx, pinned_vllm(ctx), vllm, "python")
    return problems + fingerprints(entry, ctx, pinned_ray(ctx), ray, "python")


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
    return fingerprints("vllm-kv-failure-path", ctx, pinned_vllm(ctx), symbols, "python")
