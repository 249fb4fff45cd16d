"""The fit against vLLM 0.26's own memory lines: Qwen3.5-9B at the L4 budget (0.92 x 22,888 MiB),
measured on an H200 (docs/measurements.md). The log lines below carry those measured figures in vLLM
0.26's exact formats (the run's full logs are not in the repository; its figures are in
docs/measurements.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from measure import vllm_log
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.fit import model_fit
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.serving import fit_prediction, model_table, vllm_fit
from ray_llm_eks.domain.serving.fit_prediction import Engine, predict
from ray_llm_eks.domain.serving.llm_config import EngineKwargs
from ray_llm_eks.domain.serving.model_table import GIB, MIB
from ray_llm_eks.domain.serving.serve_app import ServeDocument, parse_document

QWEN = model_table.KNOWN_MODELS["Qwen/Qwen3.5-9B"]
LLAMA_ID = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA = model_table.KNOWN_MODELS[LLAMA_ID]
L4 = aws_facts.INSTANCE_SPECS["g6.8xlarge"]
# The dev stack's engine: max_model_len 4096, 2048 batched tokens, TP 1, language_model_only.
DEV = Engine(4096, 1, 1, 0.92, "auto", 2048, language_model_only=True)

_CONFIG = (
    "(ServeReplica:llm:LLMServer:prefill pid=2870) INFO 12-01 14:20:58 [interface.py:906] Setting attention block "
    "size to 528 tokens to ensure that attention page size is >= mamba page size.\n"
    "(ServeReplica:llm:LLMServer:prefill pid=2870) INFO 12-01 14:20:58 [interface.py:930] Padding mamba page size "
    "by 0.76% to ensure that mamba page size and attention page size are exactly equal.\n"
)


def _engine_log(pid: int, kv_gib: str, tokens: str, concurrency: str, refusal: str = "") -> str:
    core = f"(EngineCore_DP0 pid={pid}) "
    lines = [
        f"{core}INFO 12-01 14:21:39 [gpu_model_runner.py:5348] Model loading took 16.8 GiB memory and 3.112044 seconds",
        f"{core}INFO 12-01 14:22:51 [gpu_worker.py:561] Available KV cache memory: {kv_gib} GiB",
        f"{core}INFO 12-01 14:22:51 [kv_cache_utils.py:2177] GPU KV cache size: {tokens} tokens",
        f"{core}INFO 12-01 14:22:51 [kv_cache_utils.py:2178] Maximum concurrency for 4,096 tokens per request: "
        f"{concurrency}x",
    ]
    if refusal:
        lines.append(f"{core}ERROR 12-01 14:22:52 [core.py:1211] ValueError: {refusal}")
    return "\n".join(lines) + "\n"


# (max_num_seqs, CUDA graphs, log): the four engine starts of the GPU run.
MEASURED = {
    "graphs-256": (256, True, _CONFIG + _engine_log(3101, "1.17", "26,810", "6.55", vllm_fit.mamba_refusal(256, 72))),
    "graphs-64": (64, True, _CONFIG + _engine_log(3377, "1.39", "32,023", "7.82")),
    "eager-64-prefill": (64, False, _CONFIG + _engine_log(4012, "3.15", "72,610", "17.73")),
    "eager-64-decode": (64, False, _engine_log(4388, "3.22", "74,100", "18.09")),
}


def _measured(name: str) -> tuple[Engine, vllm_log.EngineMemory]:
    seqs, graphs, log = MEASURED[name]
    (engine,) = vllm_log.parse(log)
    return replace(DEV, max_num_seqs=seqs, enforce_eager=not graphs), engine


# ---- vLLM's arithmetic, from the model's config


def test_qwen35_page_alignment_is_vllms():
    """24 Gated DeltaNet layers: conv state (2 x 16 x 128 + 32 x 128) x 3 x 2 B + SSM state 32 x 128 x 128
    x 4 B (mamba_ssm_dtype float32) = 2,146,304 B; the attention block grows to the multiple of 16 whose
    page (4 KiB a token) covers it: 528 tokens, the state padded by 0.76% to 2,162,688 B (measured)."""
    layout = fit_prediction.layout(QWEN, DEV)
    assert layout.mamba_page_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 4 == 2_146_304
    assert layout.block_size == 528 and layout.page_bytes == 2_162_688
    assert round(100 * (layout.page_bytes - layout.mamba_page_bytes) / layout.mamba_page_bytes, 2) == 0.76
    # 8 attention + 24 Mamba layers: groups of 8 (1 attention + 3 Mamba) share one pool.
    assert (layout.group_size, layout.attention_groups, layout.mamba_groups) == (8, 1, 3)
    assert layout.bytes_per_block == 16.5 * MIB
    assert layout.blocks_per_request(4096) == 8 + 3


@pytest.mark.parametrize(
    ("kv_gib", "blocks", "tokens", "concurrency"),
    [(1.17, 72, 26_810, 6.55), (1.39, 86, 32_023, 7.82), (3.15, 195, 72_610, 17.73), (3.22, 199, 74_100, 18.09)],
)
def test_kv_memory_becomes_vllms_blocks_tokens_and_concurrency(kv_gib, blocks, tokens, concurrency):
    """From vLLM's "Available KV cache memory" line, its other lines follow exactly."""
    layout = fit_prediction.layout(QWEN, DEV)
    assert layout.num_blocks(kv_gib * GIB) == blocks
    assert layout.tokens(blocks, 4096) == tokens
    assert round(layout.concurrency(blocks, 4096), 2) == concurrency


def test_state_dtype_tensor_parallelism_and_prefix_caching_change_the_pool():
    bf16 = fit_prediction.layout(QWEN, replace(DEV, mamba_ssm_cache_dtype="bfloat16"))
    assert bf16.mamba_page_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 2 and bf16.block_size == 272
    tp2 = fit_prediction.layout(QWEN, replace(DEV, tensor_parallel=2))
    assert tp2.mamba_page_bytes == 2_146_304 // 2 and tp2.block_size == 528 and tp2.page_bytes == 2_162_688 // 2
    # Prefix caching on: mamba_cache_mode "align", two state pages per Mamba group and request.
    assert fit_prediction.layout(QWEN, replace(DEV, prefix_caching=True)).blocks_per_request(4096) == 8 + 2 * 3


def test_attention_only_model_keeps_blocks_of_16():
    layout = fit_prediction.layout(LLAMA, DEV)
    assert (layout.block_size, layout.group_size, layout.mamba_groups) == (16, 32, 0)
    assert layout.bytes_per_block == 16 * 128 * 1024 and layout.blocks_per_request(8192) == 512


def test_vllm_defaults_depend_on_the_gpu():
    """Ray Serve LLM builds engines as the OpenAI server: 256 sequences / 2048 tokens under 70 GiB (and
    on the A100), 1024 / 8192 above."""
    h100, a100 = aws_facts.INSTANCE_SPECS["p5.48xlarge"], aws_facts.INSTANCE_SPECS["p4d.24xlarge"]
    assert (DEV.on(L4).max_num_seqs, replace(DEV, max_num_batched_tokens=None).on(L4).max_num_batched_tokens) == (
        256,
        2048,
    )
    on_h100 = Engine(4096, 1, 1, 0.9, "auto").on(h100)
    assert (on_h100.max_num_seqs, on_h100.max_num_batched_tokens) == (1024, 8192)
    assert Engine(4096, 1, 1, 0.9, "auto").on(a100).max_num_seqs == 256


# ---- The prediction against the measured lines, within the stated tolerance


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_prediction_agrees_with_vllms_lines(name):
    engine, measured = _measured(name)
    verdict = vllm_log.compare(measured, predict(QWEN, engine, L4))
    assert verdict.agree, str(verdict)
    assert verdict.emulated, "the reserve was measured on an H200 at the L4's budget"
    assert any("KV cache memory" in line for line in verdict.lines)


def test_the_256_refusal_is_predicted_with_vllms_numbers():
    engine, measured = _measured("graphs-256")
    prediction = predict(QWEN, engine, L4)
    assert measured.refused.startswith("max_num_seqs (256) exceeds available Mamba cache blocks (72)")
    assert prediction.refusal(0.0) == vllm_fit.mamba_refusal(256, prediction.num_blocks)
    assert abs(prediction.num_blocks - measured.mamba_blocks) <= fit_prediction.KV_TOLERANCE_GIB * GIB / (16.5 * MIB)


def test_a_model_without_the_state_disagrees():
    """The same model without its linear-attention state (an attention-only layout): vLLM's lines refute it."""
    stateless = replace(QWEN, linear=None)
    engine, measured = _measured("graphs-64")
    verdict = vllm_log.compare(measured, predict(stateless, engine, L4))
    assert not verdict.agree and "FAIL" in str(verdict)


def test_a_reserve_off_by_more_than_the_tolerance_disagrees():
    engine, measured = _measured("graphs-64")
    off = replace(predict(QWEN, engine, L4), reserve=predict(QWEN, engine, L4).reserve + 0.12 * GIB)
    assert not vllm_log.compare(measured, off).agree


# ---- max_num_seqs: the fixed point, rendered; an explicit one that cannot fit is refused


def test_largest_max_num_seqs_is_a_fixed_point_between_the_measured_runs():
    """The reserve grows with max_num_seqs (256 -> 72 blocks, 64 -> 86): the largest s with s <= blocks(s)
    less the start margin."""
    seqs = fit_prediction.largest_max_num_seqs(QWEN, DEV, L4)
    at = lambda s: predict(QWEN, replace(DEV, max_num_seqs=s), L4)  # noqa: E731
    assert seqs <= at(seqs).num_blocks_with_margin and seqs + 1 > at(seqs + 1).num_blocks_with_margin
    # 64 started on the GPU; for s >= 64 the blocks are at most the 86 that 64 left.
    assert 64 <= seqs <= 86
    # The least-squares line through the cold starts (64, 78 and 256 sequences): each measured pool within
    # the tolerance (86 and 72 blocks measured).
    assert abs(at(64).num_blocks - 86) <= 6 and abs(at(256).num_blocks - 72) <= 6


def test_the_derived_max_num_seqs_starts_in_every_process_layout_seen():
    """The dev engine's arguments at the L4's budget on one H100 got 77 Mamba blocks under plain `vllm serve`
    and 83-84 under Ray: the derived max_num_seqs starts under both, with blocks to spare below the fewer
    (78, derived at the tolerance alone, was refused by `vllm serve`)."""
    seqs = fit_prediction.largest_max_num_seqs(QWEN, DEV, L4)
    assert seqs <= 77 - 5
    line = predict(QWEN, replace(DEV, max_num_seqs=seqs), L4).summary()
    assert "of the 84 Mamba blocks" in line and "above max_num_seqs: the margin" in line


def _served(model_id: str, engine_kwargs: dict) -> ServeDocument:
    llm = {"model_loading_config": {"model_id": model_id}, "engine_kwargs": engine_kwargs}
    app = {"import_path": "ray.serve.llm:build_openai_app", "args": {"llm_configs": [llm]}}
    return parse_document({"applications": [app]}, "t")


def _doc(**engine_kwargs) -> ServeDocument:
    """The dev stack's Qwen3.5-9B engine, collocated."""
    kwargs = {"max_model_len": 4096, "max_num_batched_tokens": 2048, "language_model_only": True, **engine_kwargs}
    return _served("Qwen/Qwen3.5-9B", kwargs)


def _llama(**engine_kwargs) -> ServeDocument:
    """The same engine for Llama 3.1 8B, an attention-only model without a vision tower to leave out."""
    return _served(LLAMA_ID, {"max_model_len": 4096, "max_num_batched_tokens": 2048, **engine_kwargs})


def _kwargs(document: ServeDocument) -> EngineKwargs:
    return document.roles["collocated"].engine


def test_hybrid_roles_get_the_largest_max_num_seqs_rendered():
    given = _doc()
    fitted = model_fit.fit_serving(given, [("collocated", "g6.8xlarge")], set(), None)
    largest = fit_prediction.largest_max_num_seqs(QWEN, DEV, L4)
    assert _kwargs(fitted.document)["max_num_seqs"] == largest and fitted.derived == {"collocated": largest}
    assert "max_num_seqs" not in _kwargs(given), "the input document is left as it was"
    (line,) = fitted.lines
    assert "max_num_seqs derived" in line and "tokens" in line and "concurrency at 4,096 tokens" in line


def test_the_smallest_gpu_of_a_role_decides_and_every_pool_is_checked():
    pools = [("collocated", "g6e.xlarge"), ("collocated", "g6.8xlarge")]
    document = model_fit.fit_serving(_doc(), pools, set(), None).document
    assert _kwargs(document)["max_num_seqs"] == fit_prediction.largest_max_num_seqs(QWEN, DEV, L4)


def test_eager_and_attention_only_roles_keep_vllms_default():
    document = model_fit.fit_serving(_doc(enforce_eager=True), [("collocated", "g6.8xlarge")], set(), None).document
    assert "max_num_seqs" not in _kwargs(document)
    fitted = model_fit.fit_serving(_llama(), [("collocated", "g6.8xlarge")], set(), None)
    (line,) = fitted.lines
    assert "max_num_seqs" not in _kwargs(fitted.document) and "max_num_seqs vLLM default" in line
    assert not fitted.derived


def test_asking_256_on_an_l4_fails_in_one_line_with_vllms_reason():
    with pytest.raises(ConfigError) as error:
        model_fit.fit_serving(_doc(max_num_seqs=256), [("collocated", "g6.8xlarge")], set(), None)
    message = str(error.value)
    assert "\n" not in message
    assert "invalid config collocated engine_kwargs.max_num_seqs = 256: " in message
    assert "max_num_seqs (256) exceeds available Mamba cache blocks (72)" in message
    assert f"max_num_seqs = 256: at most {fit_prediction.largest_max_num_seqs(QWEN, DEV, L4)} for" in message


def test_too_many_sequences_of_a_dense_model_name_the_largest_that_starts():
    """An attention-only model has no Mamba blocks: the runtime reserve alone grows with max_num_seqs. The value
    named is one vLLM would start with, and one more is refused."""
    with pytest.raises(ConfigError) as error:
        model_fit.fit_serving(_llama(max_num_seqs=100_000), [("collocated", "g6.xlarge")], set(), None)
    assert error.value.key == "collocated engine_kwargs.max_num_seqs" and error.value.value == 100_000
    fewer = int(error.value.allowed.removeprefix("at most ").split()[0])
    engine = Engine(4096, 1, 1, 0.92, "auto", 2048)
    l4 = aws_facts.INSTANCE_SPECS["g6.xlarge"]
    assert predict(LLAMA, replace(engine, max_num_seqs=fewer), l4).refusal() is None
    assert predict(LLAMA, replace(engine, max_num_seqs=fewer + 1), l4).refusal() is not None
    model_fit.fit_serving(_llama(max_num_seqs=fewer), [("collocated", "g6.xlarge")], set(), None)


def test_a_role_fit_predicts_what_a_rehearsal_forced():
    """The GPU run forced 64 sequences and then eager mode on the rendered document: a RoleFit answers
    for both, and a Mamba refusal in the log is compared at the max_num_seqs it names."""
    document = model_fit.fit_serving(_doc(), [("collocated", "g6.8xlarge")], set(), None).document
    fit = model_fit.fit_document(document, {"collocated": "g6.8xlarge"})["collocated"]
    for name, (seqs, graphs, _) in MEASURED.items():
        _, measured = _measured(name)
        assert vllm_log.compare(measured, fit.at(seqs, enforce_eager=not graphs)).agree, name
    _, refused = _measured("graphs-256")
    assert vllm_log.compare(refused, fit).agree


def test_an_explicit_max_num_seqs_that_fits_is_kept():
    fitted = model_fit.fit_serving(_doc(max_num_seqs=64), [("collocated", "g6.8xlarge")], set(), None)
    (line,) = fitted.lines
    assert _kwargs(fitted.document)["max_num_seqs"] == 64 and "max_num_seqs set" in line and not fitted.derived
    # vLLM logged 86 blocks, 32,023 tokens and 7.82x at 64 sequences: the line through the cold starts says
    prediction = predict(QWEN, replace(DEV, max_num_seqs=64), L4)
    assert prediction.num_blocks == 85 and f"{prediction.kv_tokens:,} tokens, {prediction.concurrency:.2f}x" in line


def test_the_cuda_context_stays_outside_the_budget():
    with pytest.raises(ConfigError, match="less than desired GPU memory utilization"):
        model_fit.fit_serving(_doc(gpu_memory_utilization=0.99), [("collocated", "g6.8xlarge")], set(), None)


def test_a_users_hybrid_model_spec_names_its_linear_layers():
    facts = {
        "parameters": 3e9,
        "weightDtype": "bfloat16",
        "kvLayers": 8,
        "kvHeads": 4,
        "headDim": 256,
        "stateMiBPerSequence": 49.1,
        "maxContext": 32768,
    }
    with pytest.raises(ConfigError, match=r"modelSpec\.linearLayers"):
        model_table.spec_from_config(facts)
    spec = model_table.spec_from_config({**facts, "linearLayers": 24})
    layout = fit_prediction.layout(spec, DEV)
    assert layout.block_size == 528 and (layout.attention_groups, layout.mamba_groups) == (1, 3)


# ---- The log parser


def test_parser_reads_each_engine_and_its_config_lines():
    logs = MEASURED["graphs-256"][2] + MEASURED["graphs-64"][2]
    first, second = vllm_log.parse(logs)
    assert (first.weights_gib, first.kv_cache_gib, first.kv_tokens) == (16.8, 1.17, 26_810)
    assert (first.concurrency, first.concurrency_len) == (6.55, 4096)
    assert (first.block_size, first.mamba_padding_pct) == (528, 0.76)
    assert (first.max_num_seqs, first.mamba_blocks) == (256, 72) and first.refused.startswith("max_num_seqs (256)")
    assert (second.kv_cache_gib, second.block_size, second.refused) == (1.39, 528, None)


def test_parser_reads_the_other_memory_lines():
    log = (
        "INFO 12-01 14:25:10 [model_runner.py:306] Model loading took 16.8 GiB and 2.950000 seconds\n"
        "INFO 12-01 14:25:40 [gpu_model_runner.py:6738] Estimated CUDA graph memory: 0.15 GiB total\n"
        "INFO 12-01 14:26:40 [gpu_worker.py:845] Free memory on device (139.2/139.8 GiB) on startup. Desired GPU "
        "memory utilization is (0.1471, 20.56 GiB). Actual usage is 16.8 GiB for weight, 1.98 GiB for peak "
        "activation, 0.24 GiB for non-torch memory, and 0.19 GiB for CUDAGraph memory. Replace ...\n"
        "ERROR 12-01 14:30:00 [core.py:1211] ValueError: To serve at least one request with the model's max seq "
        "len (131072), (16.0 GiB KV cache is needed, which is larger than the available KV cache memory (1.4 GiB). "
        "Based on the available memory, the estimated maximum model length is 11200. Try increasing ...\n"
    )
    (engine,) = vllm_log.parse(log)
    assert (engine.weights_gib, engine.load_seconds, engine.cudagraph_estimate_gib) == (16.8, 2.95, 0.15)
    assert (engine.budget_gib, engine.activation_gib, engine.non_torch_gib, engine.cudagraph_gib) == (
        20.56,
        1.98,
        0.24,
        0.19,
    )
    assert (
        engine.refused.startswith("To serve at least one request") and "maximum model length is 11200" in engine.refused
    )


def test_a_log_without_memory_lines_disagrees():
    (verdict_input,) = vllm_log.parse("INFO something else\n") or [vllm_log.EngineMemory()]
    assert not vllm_log.compare(verdict_input, predict(QWEN, DEV, L4)).agree


@pytest.mark.parametrize(
    ("kind", "values"),
    [
        ("weights", ("16.8", 3.112044)),
        ("weights_v2", ("16.8", 2.95)),
        ("kv_cache", ("1.17",)),
        ("kv_tokens", ("26,810",)),
        ("concurrency", ("4,096", 6.55)),
        ("cudagraph_estimate", (0.15,)),
    ],
)
def test_the_parser_reads_vllms_own_format_strings(kind, values):
    """Each format string vLLM 0.26 logs (`make check-upstream` finds them in the wheel), filled in
    as vLLM fills it, is read back."""
    _, (fmt, *_) = vllm_log.LOGGED_BY[kind]
    (engine,) = vllm_log.parse(f"INFO 12-01 14:21:39 [x.py:1] {fmt % values}\n")
    read = {
        "weights": engine.weights_gib,
        "weights_v2": engine.weights_gib,
        "kv_cache": engine.kv_cache_gib,
        "kv_tokens": engine.kv_tokens,
        "concurrency": engine.concurrency,
        "cudagraph_estimate": engine.cudagraph_estimate_gib,
    }[kind]
    assert read == float(str(values[-1 if kind == "concurrency" else 0]).replace(",", ""))


# ---- A model outside the table: its modelSpec from config.json

QWEN35_9B_TEXT_CONFIG = {
    "model_type": "qwen3_5_text",
    "dtype": "bfloat16",
    "num_hidden_layers": 32,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 262144,
}


def test_hf_model_spec_derives_a_gated_deltanet_state_that_sizes_the_pool_as_the_table():
    from measure.hf_model_spec import spec_from_hf_config

    derived, missing = spec_from_hf_config({"text_config": QWEN35_9B_TEXT_CONFIG})
    assert set(missing) == {"parameters"}
    assert derived["linearLayers"] == 24 and derived["stateMiBPerSequence"] == round(QWEN.state_mib_per_sequence, 2)
    own = model_table.spec_from_config({**derived, "parameters": QWEN.loaded_parameters(True)})
    # The state to 0.01 MiB: the same block, page, groups and pool as the table's exact shapes.
    assert replace(fit_prediction.layout(own, DEV), mamba_page_bytes=0) == replace(
        fit_prediction.layout(QWEN, DEV), mamba_page_bytes=0
    )


# ---- A restart that loads its compiled graphs from vLLM's compile cache (the GPU rehearsal, run twice)

_WORKER = "(EngineCore pid=14279) (RayWorkerProc pid=14519) (Worker pid=14519) "
_FROM_CACHE = (
    f"{_WORKER}INFO 12-01 18:00:49 [gpu_model_runner.py:5347] Model loading took 16.8 GiB memory and 3.675025 seconds\n"
    f"{_WORKER}INFO 12-01 18:00:54 [backends.py:292] Directly load the compiled graph(s) for compile range (1, 2048) "
    "from the cache, took 1.622 s\n"
    f"{_WORKER}INFO 12-01 18:00:57 [gpu_worker.py:560] Available KV cache memory: 2.93 GiB\n"
    "(EngineCore pid=14279) INFO 12-01 18:00:57 [kv_cache_utils.py:2177] GPU KV cache size: 67,397 tokens\n"
    "(EngineCore pid=14279) INFO 12-01 18:00:57 [kv_cache_utils.py:2178] Maximum concurrency for 4,096 tokens per "
    "request: 16.45x\n"
)
_COMPILED = (
    _FROM_CACHE.replace(
        "Directly load the compiled graph(s) for compile range (1, 2048) from the cache, took 1.622 s",
        "Compiling a graph for compile range (1, 2048) takes 26.17 s",
    )
    .replace("2.93 GiB", "1.34 GiB")
    .replace("67,397", "30,533")
    .replace("16.45x", "7.45x")
)


def _rendered_dev_fit() -> model_fit.RoleFit:
    document = model_fit.fit_serving(_doc(), [("collocated", "g6.8xlarge")], set(), None).document
    return model_fit.fit_document(document, {"collocated": "g6.8xlarge"})["collocated"]


def test_the_log_says_whether_the_compiled_graphs_came_from_the_cache():
    (warm,) = vllm_log.parse(_FROM_CACHE)
    (cold,) = vllm_log.parse(_COMPILED)
    assert (warm.compile_cache, warm.kv_cache_gib) == (True, 2.93)
    assert (cold.compile_cache, cold.kv_cache_gib) == (False, 1.34)


def test_a_restart_from_the_compile_cache_is_held_against_its_own_reserve():
    """The dev engine as rendered then (78 sequences, before the start margin) started cold with 1.34 GiB of KV
    cache and, restarted on the same machine with the compiled graphs from the cache, with 2.93 GiB: each agrees
    with its own prediction, and the restart's lines refute the cold prediction (what the GPU rehearsal's second
    run showed)."""
    fit = model_fit.fit_document(_doc(max_num_seqs=78), {"collocated": "g6.8xlarge"})["collocated"]
    (warm,) = vllm_log.parse(_FROM_CACHE)
    (cold,) = vllm_log.parse(_COMPILED)
    assert vllm_log.compare(cold, fit).agree
    assert vllm_log.compare(warm, fit).agree, str(vllm_log.compare(warm, fit))
    assert not vllm_log.compare(warm, fit.prediction).agree


def test_the_derived_max_num_seqs_is_the_cold_starts():
    """A new node compiles: its smaller KV cache decides whether vLLM starts, whatever a restart gets."""
    cold = fit_prediction.largest_max_num_seqs(QWEN, DEV, L4)
    warm = fit_prediction.largest_max_num_seqs(QWEN, replace(DEV, compile_cache=True), L4)
    assert cold == _rendered_dev_fit().prediction.max_num_seqs < warm


def test_an_engines_start_is_read_by_phase_and_a_restart_counts_last():
    """vLLM 0.26's own timings (vllm_log.LOGGED_BY: compile_total, cudagraph_capture, engine_init, weights)."""
    first = (
        "(ServeReplica:llm:PDDecodeServer:m pid=7) INFO 12-02 13:01:02 [gpu_model_runner.py:4310] Model loading took "
        "16.8 GiB memory and 31.504211 seconds\n"
        "(EngineCore_DP0 pid=9) INFO 12-02 13:01:40 [monitor.py:53] torch.compile took 27.35 s in total\n"
        "(EngineCore_DP0 pid=9) INFO 12-02 13:01:52 [gpu_model_runner.py:6845] Graph capturing finished in 11 secs, "
        "took 0.19 GiB\n"
        "(EngineCore_DP0 pid=9) INFO 12-02 13:01:53 [core.py:341] init engine (profile, create kv cache, warmup model) "
        "took 49.83 s (compilation: 27.35 s)\n"
    )
    start = vllm_log.startup(first)
    assert (start.load_s, start.compile_s, start.cudagraph_s, start.engine_init_s) == (31.504211, 27.35, 11.0, 49.83)
    assert start.line() == (
        "weights 31.5 s, torch.compile 27.4 s, CUDA graphs 11.0 s, engine init (compile and graphs included) 49.8 s"
    )
    restarted = vllm_log.startup(first + first.replace("27.35 s in total", "3.10 s in total"))
    assert restarted.compile_s == 3.1 and restarted.engine_init_s == 49.83
    assert vllm_log.startup("INFO nothing here\n").line() == "no start timing in its log"
