"""vLLM 0.26's memory lines for one engine on one GPU, predicted: the engine settings that decide memory,
the weights, the runtime reserve, the KV cache pool and its blocks (the arithmetic of
ray_llm_eks/domain/serving/vllm_fit.py),
and the largest max_num_seqs a hybrid model's blocks hold. No checks here: ray_llm_eks/domain/fit/model_fit.py
refuses."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.serving import vllm_fit
from ray_llm_eks.domain.serving.fields import given
from ray_llm_eks.domain.serving.llm_config import EngineKwargs
from ray_llm_eks.domain.serving.model_table import DTYPE_BYTES, GIB, MIB, ModelSpec

VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.26 CacheConfig default (vllm/config/cache.py)
# The least context a max_model_len of -1 (ray_llm_eks/domain/serving/role_view.py AUTO_MAX_MODEL_LEN) must leave room
# for.
MIN_CONTEXT_TOKENS = 16

# The runtime reserve of a model without measurements of its own (vLLM V1 gpu_worker
# determine_available_memory: activation peak of the profiling pass + non-torch memory + CUDA graph
# estimate). Logs of 8B models at vLLM's default 256 sequences: activation peak 1.19-1.26 GiB at 8192
# batched tokens, ~0.2-0.4 GiB at 2048; non-torch 0.05-0.35 GiB at TP 1 and ~1.8 GiB more per GPU at
# TP 2 (NCCL buffers; vllm PR #10511); CUDA graphs 0.3-0.9 GiB. So: 2 GiB at TP 1 with <= 2048 batched
# tokens, +1 GiB above, +1.8 GiB with TP/PP > 1.
RUNTIME_RESERVE_GIB = 2.0
LARGE_BATCH_EXTRA_GIB = 1.0
MULTI_GPU_EXTRA_GIB = 1.8
RESERVE_REFERENCE_SEQS = 256  # the max_num_seqs those logs ran with
# Beyond that, per sequence: the one slope measured, Qwen3.5-9B with compile + CUDA graphs between 64
# and 256 sequences (docs/measurements.md, GPU: vLLM 0.26 memory lines): 1.15 MiB.
RESERVE_PER_SEQUENCE_MIB = 1.2
# Outside vLLM's budget: nvidia-smi showed ~0.5 GiB per engine beyond it (the CUDA context) in the
# H200 run of docs/measurements.md. vLLM refuses to start when the free memory is below the budget
# (v1/worker/utils.py request_memory).
CUDA_CONTEXT_GIB = 0.5
# Tolerance of the prediction against vLLM's own lines: the KV cache memory within 0.10 GiB (the
# spread of two engines with the same settings on the same GPU was 0.07 GiB, 3.15 vs 3.22 GiB; each
# logged figure is rounded to 0.01 GiB); the weights within 0.05 GiB. Blocks, tokens and concurrency
# follow from the KV cache memory exactly (ray_llm_eks/domain/serving/vllm_fit.py), so their tolerance is the KV one in
# their unit. Checks and the derived max_num_seqs use the low end: what fits, fits within it.
KV_TOLERANCE_GIB = 0.10
WEIGHTS_TOLERANCE_GIB = 0.05
# A derived max_num_seqs leaves this much of the predicted KV cache unused: the margin against a runtime reserve
# larger than the one the prediction was fitted to. The same engine arguments at the same budget on one H100 got
# 77 Mamba blocks under plain `vllm serve` and 83-84 under Ray (issue of 2026-12-07, main 75f0e19): 0.11 GiB
# apart, beyond the tolerance above; a real L4's reserve is unmeasured. 0.25 GiB is 15 blocks of Qwen3.5-9B's
# 16.5 MiB on an L4, twice the spread seen.
START_MARGIN_GIB = 0.25


@dataclass(frozen=True)
class Engine:
    """The vLLM settings of one role that decide memory (None: vLLM's default for the GPU)."""

    max_model_len: int
    tensor_parallel: int
    pipeline_parallel: int
    gpu_memory_utilization: float
    kv_cache_dtype: str  # "auto" = the weights' dtype
    max_num_batched_tokens: int | None = None
    language_model_only: bool = False
    max_num_seqs: int | None = None
    enforce_eager: bool = False  # no torch.compile, no CUDA graphs
    block_size: int | None = None
    prefix_caching: bool = False  # enable_prefix_caching: off by default for hybrid models in vLLM 0.26
    mamba_ssm_cache_dtype: str | None = None  # overrides the model's mamba_ssm_dtype
    # Not an engine argument: the start loads its compiled graphs from vLLM's compile cache (a restart on the
    # same node). False, a cold start, is what every check and the derived max_num_seqs use.
    compile_cache: bool = False

    @classmethod
    def of(cls, engine: EngineKwargs, max_model_len: int) -> Engine:
        """`max_model_len`: the effective one (ray_llm_eks/domain/serving/role_view.py effective_max_model_len)."""
        return cls(
            max_model_len=max_model_len,
            tensor_parallel=engine.tensor_parallel,
            pipeline_parallel=engine.pipeline_parallel,
            gpu_memory_utilization=given(engine.gpu_memory_utilization, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION),
            kv_cache_dtype=given(engine.kv_cache_dtype, "auto"),
            max_num_batched_tokens=engine.max_num_batched_tokens,
            language_model_only=bool(engine.language_model_only),
            max_num_seqs=engine.max_num_seqs,
            enforce_eager=bool(engine.enforce_eager),
            block_size=engine.block_size,
            prefix_caching=bool(engine.enable_prefix_caching),
            mamba_ssm_cache_dtype=_not_auto(engine.mamba_ssm_cache_dtype),
        )

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    def on(self, gpu: aws_facts.InstanceSpec) -> Engine:
        """With vLLM's defaults for this GPU filled in (EngineArgs.get_batch_defaults, OPENAI_API_SERVER;
        an unset max_num_seqs is also capped at max_num_batched_tokens)."""
        tokens = self.max_num_batched_tokens or vllm_fit.default_max_num_batched_tokens(
            gpu.gpu_memory_mib, gpu.gpu_model
        )
        seqs = self.max_num_seqs or min(vllm_fit.default_max_num_seqs(gpu.gpu_memory_mib, gpu.gpu_model), tokens)
        return replace(self, max_num_batched_tokens=tokens, max_num_seqs=seqs)


def _not_auto(value):
    return None if value in (None, "auto") else value


@dataclass(frozen=True)
class Prediction:
    """vLLM 0.26's memory lines for one engine on one GPU, predicted (bytes)."""

    budget: float
    weights: float
    reserve: float
    layout: vllm_fit.KvLayout
    max_model_len: int
    max_num_seqs: int
    cudagraphs: bool
    tolerance: float  # on the KV cache memory
    calibrated: bool  # the reserve comes from this model's own measurements
    emulated: bool  # ... taken on a larger GPU at this GPU's budget
    compile_cache: bool = False  # predicted for a start that loads its compiled graphs from the cache

    @property
    def kv_cache(self) -> float:
        return self.budget - self.weights - self.reserve

    @property
    def num_blocks(self) -> int:
        return self.layout.num_blocks(self.kv_cache)

    @property
    def num_blocks_low(self) -> int:
        """The blocks at the low end of the tolerance: what the checks rely on."""
        return self.layout.num_blocks(self.kv_cache - self.tolerance)

    @property
    def num_blocks_with_margin(self) -> int:
        """The blocks a derived max_num_seqs may use: the prediction less START_MARGIN_GIB of KV cache."""
        return self.layout.num_blocks(self.kv_cache - max(self.tolerance, START_MARGIN_GIB * GIB))

    @property
    def blocks_per_request(self) -> int:
        return self.layout.blocks_per_request(self.max_model_len)

    @property
    def kv_tokens(self) -> int:
        return self.layout.tokens(self.num_blocks, self.max_model_len)

    @property
    def concurrency(self) -> float:
        return self.layout.concurrency(self.num_blocks, self.max_model_len)

    @property
    def mamba_check(self) -> bool:
        """vLLM refuses max_num_seqs above the blocks: hybrid model with full CUDA graphs."""
        return self.layout.hybrid and self.cudagraphs

    def refusal(self, margin: float | None = None) -> str | None:
        """vLLM's own reason for refusing to start with `margin` bytes less KV cache memory than
        predicted (default: the tolerance, the low end); None if it starts."""
        low = self.kv_cache - (self.tolerance if margin is None else margin)
        if low <= 0:
            return (
                "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine."
            )
        blocks = self.layout.num_blocks(low)
        if blocks < self.blocks_per_request:
            needed = self.blocks_per_request * self.layout.bytes_per_block
            return (
                f"To serve at least one request with the model's max seq len ({self.max_model_len}), "
                f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({low / GIB:.2f} GiB). Based on the available memory, the estimated maximum model "
                f"length is {self.layout.longest_context(blocks)}."
            )
        if self.mamba_check and self.max_num_seqs > blocks:
            return vllm_fit.mamba_refusal(self.max_num_seqs, blocks)
        return None

    @property
    def _mode(self) -> str:
        if not self.cudagraphs:
            return "eager"
        return "CUDA graphs, compiled graphs from the cache" if self.compile_cache else "CUDA graphs"

    def summary(self) -> str:
        kind = "measured reserve" + (", emulated" if self.emulated else "") if self.calibrated else "estimated reserve"
        layout = self.layout
        block = (
            f"{self.num_blocks} blocks of {layout.block_size} tokens ({layout.bytes_per_block / MIB:.1f} MiB, "
            f"{layout.blocks_per_request(self.max_model_len)} per request)"
        )
        return (
            f"budget {gib_text(self.budget)} = weights {gib_text(self.weights)} + runtime {gib_text(self.reserve)} "
            f"(max_num_seqs {self.max_num_seqs}, {self._mode}) + KV cache "
            f"{gib_text(self.kv_cache)} -> {block}: {self.kv_tokens:,} tokens, {self.concurrency:.2f}x concurrency "
            f"at {self.max_model_len:,} tokens (+-{gib_text(self.tolerance)} KV, {kind}){self._margin_text()}"
        )

    def _margin_text(self) -> str:
        """Where vLLM refuses max_num_seqs above the blocks: how many blocks stand between the two."""
        if not self.mamba_check:
            return ""
        spare = self.num_blocks - self.max_num_seqs
        if spare < 0:
            return f"; max_num_seqs {self.max_num_seqs} is {-spare} above the {self.num_blocks} Mamba blocks"
        return (
            f"; {spare} of the {self.num_blocks} Mamba blocks ({gib_text(spare * self.layout.bytes_per_block)}) "
            "above max_num_seqs: the margin against a larger runtime reserve"
        )


def gib_text(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _dtype_bytes(model: ModelSpec, dtype: str | None) -> float:
    if dtype in ("auto", None):
        return DTYPE_BYTES[model.weight_dtype]
    return 1 if dtype.startswith("fp8") else DTYPE_BYTES.get(dtype, 2)


def layout(model: ModelSpec, engine: Engine) -> vllm_fit.KvLayout:
    model_bytes = DTYPE_BYTES[model.weight_dtype]
    linear = model.linear
    if isinstance(linear, vllm_fit.GatedDeltaNet) and engine.mamba_ssm_cache_dtype:
        linear = replace(linear, ssm_dtype=engine.mamba_ssm_cache_dtype)
    return vllm_fit.kv_layout(
        kv_layers=model.kv_layers,
        kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        kv_bytes=_dtype_bytes(model, engine.kv_cache_dtype),
        linear=linear,
        model_dtype_bytes=model_bytes,
        tensor_parallel=engine.tensor_parallel,
        pipeline_parallel=engine.pipeline_parallel,
        block_size=engine.block_size,
        prefix_caching=engine.prefix_caching,
    )


def reserve_gib(model: ModelSpec, engine: Engine) -> float:
    """Activation peak + non-torch memory + CUDA graphs, per GPU (engine with its defaults filled in)."""
    seqs, tokens, graphs = engine.max_num_seqs, engine.max_num_batched_tokens, not engine.enforce_eager
    cal = model.calibration
    if cal is not None:
        base = cal.reserve_gib(seqs, graphs, engine.compile_cache)
        extra_tokens = tokens > cal.max_num_batched_tokens
    else:
        base = RUNTIME_RESERVE_GIB + max(seqs - RESERVE_REFERENCE_SEQS, 0) * RESERVE_PER_SEQUENCE_MIB / 1024
        extra_tokens = tokens > 2048
    return base + (LARGE_BATCH_EXTRA_GIB if extra_tokens else 0.0) + (MULTI_GPU_EXTRA_GIB if engine.gpus > 1 else 0.0)


def weights_bytes(model: ModelSpec, engine: Engine) -> float:
    computed = model.loaded_parameters(engine.language_model_only) * DTYPE_BYTES[model.weight_dtype] / engine.gpus
    if model.calibration is None:
        return computed
    measured_with = model.loaded_parameters(True) * DTYPE_BYTES[model.weight_dtype]
    return computed + model.calibration.weights_overhead_gib(measured_with / GIB) * GIB


def predict(model: ModelSpec, engine: Engine, gpu: aws_facts.InstanceSpec) -> Prediction:
    """vLLM's memory lines for this engine on one GPU of this instance type."""
    engine = engine.on(gpu)
    calibrated = model.calibration is not None
    return Prediction(
        budget=gpu.gpu_memory_mib * MIB * engine.gpu_memory_utilization,
        weights=weights_bytes(model, engine),
        reserve=reserve_gib(model, engine) * GIB,
        layout=layout(model, engine),
        max_model_len=engine.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        cudagraphs=not engine.enforce_eager,
        tolerance=KV_TOLERANCE_GIB * GIB,
        calibrated=calibrated,
        emulated=calibrated and model.calibration.emulated,
        compile_cache=engine.compile_cache,
    )


def largest_max_num_seqs(model: ModelSpec, engine: Engine, gpu: aws_facts.InstanceSpec) -> int:
    """The fixed point: the largest s (up to vLLM's default for the GPU) with s <= blocks(s) less the start
    margin (START_MARGIN_GIB), where blocks(s) shrinks as the reserve grows with s; 0 if none."""
    cap = engine.on(gpu).max_num_seqs if engine.max_num_seqs is None else engine.max_num_seqs
    for seqs in range(cap, 0, -1):
        if seqs <= predict(model, replace(engine, max_num_seqs=seqs), gpu).num_blocks_with_margin:
            return seqs
    return 0


def heads_refusal(model: ModelSpec, tensor_parallel: int) -> str | None:
    """vLLM's reason to refuse this tensor-parallel size for the model's heads (ray_llm_eks/domain/serving/vllm_fit.py);
    None if it accepts it or the model's head counts are unknown (check_heads asks a modelSpec for them)."""
    if tensor_parallel == 1 or model.attention_heads is None:
        return None
    return vllm_fit.tensor_parallel_refusal(tensor_parallel, model.attention_heads, model.kv_heads, model.linear_heads)
