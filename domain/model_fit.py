"""Will the model fit, and how many sequences can it run? Weights, runtime memory and the KV cache
pool against the GPUs of each role's pool, checked offline before any resource is declared (instead of
Ray workers crash-looping on the GPU nodes 25 minutes into `pulumi up`).

Per GPU, as vLLM 0.26 counts it (v1/worker/gpu_worker.py Worker.determine_available_memory):

    budget   = GPU memory x gpu_memory_utilization        (the CUDA context comes on top)
    KV cache = budget - weights - runtime reserve         (activation peak + non-torch + CUDA graphs)
    blocks   = KV cache // (page x layers per group)      (domain/vllm_fit.py: vLLM's own arithmetic)

The runtime reserve depends on max_num_seqs (more CUDA graphs, larger sampler buffers) and on whether the
start compiles: the profiling pass of a start without vLLM's compile cache holds torch.compile's own memory
in its activation peak, so a cold start (every new node) has the least KV cache and decides whether vLLM
starts; a restart that loads the compiled graphs from the cache gets more. And a hybrid
model needs one block per running sequence before vLLM captures its CUDA graphs; so the largest
max_num_seqs that fits is a fixed point: s <= blocks(s). It is derived and rendered for hybrid models,
and an explicit one that cannot fit is refused with vLLM's own reason.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from domain import aws_facts, vllm_fit
from domain.errors import UNSET, ConfigError, in_serve_config, yaml_text
from domain.model_table import DTYPE_BYTES, GIB, MIB, ModelSpec, model_spec
from domain.role_view import RoleView, view_of
from domain.serve_config import check_tensor_parallel, llm_configs_by_role, model_of

VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.26 CacheConfig default (vllm/config/cache.py)
# The least context a max_model_len of -1 (domain/role_view.py AUTO_MAX_MODEL_LEN) must leave room for.
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
# follow from the KV cache memory exactly (domain/vllm_fit.py), so their tolerance is the KV one in
# their unit. Checks and the derived max_num_seqs use the low end: what fits, fits within it.
KV_TOLERANCE_GIB = 0.10
WEIGHTS_TOLERANCE_GIB = 0.05


# How a line names the serve config the fit checks: rendered from the stack's serveConfig file and keys.
SERVED = "the served document"


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
    def from_engine_kwargs(cls, kwargs: Mapping, max_model_len: int) -> Engine:
        """`max_model_len`: the effective one (domain/role_view.py effective_max_model_len)."""
        return cls(
            max_model_len=max_model_len,
            tensor_parallel=kwargs.get("tensor_parallel_size", 1),
            pipeline_parallel=kwargs.get("pipeline_parallel_size", 1),
            gpu_memory_utilization=kwargs.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION),
            kv_cache_dtype=kwargs.get("kv_cache_dtype", "auto"),
            max_num_batched_tokens=kwargs.get("max_num_batched_tokens"),
            language_model_only=bool(kwargs.get("language_model_only", False)),
            max_num_seqs=kwargs.get("max_num_seqs"),
            enforce_eager=bool(kwargs.get("enforce_eager", False)),
            block_size=kwargs.get("block_size"),
            prefix_caching=bool(kwargs.get("enable_prefix_caching", False)),
            mamba_ssm_cache_dtype=_not_auto(kwargs.get("mamba_ssm_cache_dtype")),
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
            f"budget {_gib(self.budget)} = weights {_gib(self.weights)} + runtime {_gib(self.reserve)} "
            f"(max_num_seqs {self.max_num_seqs}, {self._mode}) + KV cache "
            f"{_gib(self.kv_cache)} -> {block}: {self.kv_tokens:,} tokens, {self.concurrency:.2f}x concurrency "
            f"at {self.max_model_len:,} tokens (+-{_gib(self.tolerance)} KV, {kind})"
        )


def _gib(n: float) -> str:
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
    """The fixed point: the largest s (up to vLLM's default for the GPU) with s <= blocks(s) at the low
    end of the tolerance, where blocks(s) shrinks as the reserve grows with s; 0 if none."""
    cap = engine.on(gpu).max_num_seqs if engine.max_num_seqs is None else engine.max_num_seqs
    for seqs in range(cap, 0, -1):
        if seqs <= predict(model, replace(engine, max_num_seqs=seqs), gpu).num_blocks_low:
            return seqs
    return 0


def heads_refusal(model: ModelSpec, tensor_parallel: int) -> str | None:
    """vLLM's reason to refuse this tensor-parallel size for the model's heads (domain/vllm_fit.py); None if
    it accepts it or the model's head counts are unknown (check_heads asks a modelSpec for them)."""
    if tensor_parallel == 1 or model.attention_heads is None:
        return None
    return vllm_fit.tensor_parallel_refusal(tensor_parallel, model.attention_heads, model.kv_heads, model.linear_heads)


def accepted(model: ModelSpec, engine: Engine, spec: aws_facts.InstanceSpec, need_efa: bool) -> bool:
    """Whether check_role would pass this engine on this instance type: the tensor-parallel size fits one
    node and the heads, the pool has EFA where the role needs it, and vLLM would start at the low end."""
    return (
        engine.tensor_parallel <= spec.gpus
        and spec.gpus >= engine.gpus
        and (spec.efa or not need_efa)
        and heads_refusal(model, engine.tensor_parallel) is None
        and predict(model, engine, spec).refusal() is None
    )


def _hosts(model: ModelSpec, engine: Engine, need_efa: bool) -> list[str]:
    """Instance types (from our table) on which this engine fits, smallest first."""
    fitting = [
        (spec.gpus, spec.gpu_memory_mib, spec.vcpus, name)
        for name, spec in aws_facts.INSTANCE_SPECS.items()
        if accepted(model, engine, spec, need_efa)
    ]
    return [name for *_, name in sorted(fitting)]


def _alternatives(
    model: ModelSpec, engine: Engine, prediction: Prediction, gpu: aws_facts.InstanceSpec, need_efa: bool
) -> list[str]:
    """What would fit: fewer sequences, a shorter context, a larger GPU, more tensor parallelism."""
    ideas = []
    blocks = prediction.num_blocks_low
    if prediction.mamba_check and prediction.max_num_seqs > blocks and blocks >= prediction.blocks_per_request:
        seqs = largest_max_num_seqs(model, replace(engine, max_num_seqs=None), gpu)
        # Above vLLM's own "at most N": N is the pool at the refused max_num_seqs, fewer sequences reserve less.
        ideas.append(
            f"max_num_seqs <= {seqs} (more than vLLM's figure at {prediction.max_num_seqs}: fewer sequences reserve "
            "less memory and leave more blocks; or leave it unset: the stack derives it)"
        )
    longest = prediction.layout.longest_context(blocks)
    if 0 < longest < engine.max_model_len:
        ideas.append(f"max_model_len <= {longest} on this GPU")
    hosts = _hosts(model, engine, need_efa)
    if hosts:
        ideas.append(f"a larger GPU at the same parallelism: {', '.join(hosts[:3])}")
    for tp in (2, 4, 8):
        wider = replace(engine, tensor_parallel=tp)
        if tp > engine.tensor_parallel and (hosts := _hosts(model, wider, need_efa)):
            ideas.append(f"tensor_parallel_size {tp} on an instance with >= {wider.gpus} GPUs ({', '.join(hosts[:3])})")
            break
    return ideas


def check_role(
    role: str, model_id: str, model: ModelSpec, engine: Engine, instance_type: str, need_efa: bool
) -> Prediction:
    """Raise ConfigError if one role's LLM config cannot run on its pool's instance type: vLLM would
    refuse to start (its reason in the message) at the low end of the fit's tolerance."""
    spec = aws_facts.INSTANCE_SPECS[instance_type]
    if engine.max_model_len > model.max_context:
        raise ConfigError(
            "maxModelLen", engine.max_model_len, f"at most {model.max_context}, the maximum context of {model_id}"
        )
    check_tensor_parallel(role, instance_type, spec.gpus, engine.tensor_parallel)
    check_heads(role, model_id, model, engine, instance_type, need_efa)
    total = spec.gpu_memory_mib * MIB
    if engine.gpu_memory_utilization * total > total - CUDA_CONTEXT_GIB * GIB:
        raise in_serve_config(
            SERVED,
            f"{role} engine_kwargs.gpu_memory_utilization",
            engine.gpu_memory_utilization,
            f"at most {(total - CUDA_CONTEXT_GIB * GIB) / total:.2f} on {instance_type} ({spec.gpu_model}): the CUDA "
            f"context takes ~{CUDA_CONTEXT_GIB} GiB outside vLLM's budget, and vLLM 0.26 refuses to start with "
            "'Free memory on device ... is less than desired GPU memory utilization'",
        )
    prediction = predict(model, engine, spec)
    if prediction.refusal() is None:
        return prediction
    # Quote vLLM at the predicted memory when it refuses there too, else at the low end.
    central = prediction.refusal(0.0)
    reason = central or prediction.refusal()
    would = "would" if central else f"may (within the fit's tolerance, -{_gib(prediction.tolerance)} KV cache)"
    seqs_refused = prediction.mamba_check and engine.max_num_seqs is not None and reason.startswith("max_num_seqs")
    ideas = "; ".join(_alternatives(model, engine, prediction, spec, need_efa)) or "nothing in our instance table"
    # Short by: what one request at max_model_len still lacks, at the low end of the tolerance.
    one_request = prediction.blocks_per_request * prediction.layout.bytes_per_block
    short = one_request - (prediction.kv_cache - prediction.tolerance)
    short_by = f", short by {_gib(short)} for one request at max_model_len" if short > 0 else ""
    allowed = (
        f"{model_id} does not fit the {role} GPU ({spec.gpu_model}) with {_described(engine)}: vLLM "
        f"{vllm_fit.VLLM_VERSION} {would} refuse to start: '{reason}' (predicted {prediction.summary()}{short_by}). "
        f"Would fit: {ideas}"
    )
    if seqs_refused:
        raise in_serve_config(SERVED, f"{role} engine_kwargs.max_num_seqs", engine.max_num_seqs, allowed)
    raise ConfigError(f"gpuPools.{role}", instance_type, allowed)


# The config.json names of the head counts a modelSpec gives for vLLM's tensor-parallel rules.
_HEAD_FIELDS = {
    "attentionHeads": "num_attention_heads",
    "linearKeyHeads": "linear_num_key_heads",
    "linearValueHeads": "linear_num_value_heads",
}


def check_heads(role: str, model_id: str, model: ModelSpec, engine: Engine, instance_type: str, need_efa: bool) -> None:
    """Refuse a tensor_parallel_size vLLM refuses for the model's heads, naming the sizes that would pass
    every check of check_role on this instance type (a modelSpec without the head counts is asked for them)."""
    tp = engine.tensor_parallel
    if tp == 1:
        return
    given = {
        "attentionHeads": model.attention_heads,
        "linearKeyHeads": getattr(model.linear, "key_heads", None),
        "linearValueHeads": getattr(model.linear, "value_heads", None),
    }
    missing = [name for name, value in given.items() if value is None and (name == "attentionHeads" or model.hybrid)]
    if missing:
        raise ConfigError(
            f"modelSpec.{missing[0]}",
            UNSET,
            f"required with tensor_parallel_size {tp} ({role}): vLLM {vllm_fit.VLLM_VERSION} refuses a size that "
            f"the model's heads do not divide; config.json {_HEAD_FIELDS[missing[0]]} (`make model-spec` reads it)",
        )
    reason = heads_refusal(model, tp)
    if reason is None:
        return
    spec = aws_facts.INSTANCE_SPECS[instance_type]
    sizes = [n for n in range(1, spec.gpus + 1) if heads_refusal(model, n) is None]
    fitting = [n for n in sizes if accepted(model, replace(engine, tensor_parallel=n), spec, need_efa)]
    if fitting:
        way_out = f"on {instance_type} ({spec.gpus} GPUs) tensor_parallel_size {' or '.join(map(str, fitting))}"
    else:
        way_out = f"{yaml_text(sizes)} by the heads, none of which fits {instance_type} ({spec.gpus} GPUs) in memory"
    raise in_serve_config(
        SERVED,
        f"{role} engine_kwargs.tensor_parallel_size",
        tp,
        f"a size vLLM {vllm_fit.VLLM_VERSION} accepts for {model_id}: {way_out}; vLLM refuses {tp}: {reason}",
    )


def accepts(
    config: Mapping,
    role: str,
    instance_type: str,
    need_efa: bool,
    override: ModelSpec | None,
    derived: bool,
    tensor_parallel: int | None = None,
) -> bool:
    """Whether check_role passes one role's rendered LLM config on `instance_type` (with another
    tensor_parallel_size): what a suggestion must pass. A derived max_num_seqs is derived again for that
    type, as the stack would."""
    view, spec, engine = _role(role, config, override)
    model_id = view.model_id
    if tensor_parallel is not None:
        engine = replace(engine, tensor_parallel=tensor_parallel)
    if derived:
        seqs = largest_max_num_seqs(spec, replace(engine, max_num_seqs=None), _spec(instance_type))
        engine = replace(engine, max_num_seqs=seqs or None)
    try:
        check_role(role, model_id, spec, engine, instance_type, need_efa)
    except ConfigError:
        return False
    return True


def _described(engine: Engine) -> str:
    seqs = (
        "max_num_seqs unset (vLLM's default)" if engine.max_num_seqs is None else f"max_num_seqs {engine.max_num_seqs}"
    )
    return f"max_model_len {engine.max_model_len}, {seqs}, gpu_memory_utilization {engine.gpu_memory_utilization}"


@dataclass(frozen=True)
class RoleFit:
    """The fit of one role's engine on one GPU of its pool's instance type."""

    role: str
    model_id: str
    instance_type: str
    model: ModelSpec = field(repr=False)
    engine: Engine = field(repr=False)
    prediction: Prediction
    max_num_seqs_from: str  # "derived" (by the stack), "set" (in the serve file), "vLLM default"

    def at(
        self, max_num_seqs: int | None = None, enforce_eager: bool | None = None, compile_cache: bool = False
    ) -> Prediction:
        """The prediction with another max_num_seqs or eager mode (what a rehearsal forced), or for a start
        that loads its compiled graphs from the compile cache."""
        engine = self.engine if max_num_seqs is None else replace(self.engine, max_num_seqs=max_num_seqs)
        engine = engine if enforce_eager is None else replace(engine, enforce_eager=enforce_eager)
        engine = replace(engine, compile_cache=compile_cache)
        return predict(self.model, engine, _spec(self.instance_type))

    def line(self) -> str:
        gpu = _spec(self.instance_type).gpu_model
        head = f"{self.role} ({self.instance_type}, {gpu}, max_num_seqs {self.max_num_seqs_from})"
        engine = self.engine
        if engine.gpus == 1:
            return f"{head}: {self.prediction.summary()}"
        # vLLM logs one rank's memory; each rank keeps its share of every token's KV heads (or layers), so
        # the blocks are per GPU and the tokens they hold the engine's.
        parallel = f"tensor_parallel_size {engine.tensor_parallel}" + (
            f" x pipeline_parallel_size {engine.pipeline_parallel}" if engine.pipeline_parallel > 1 else ""
        )
        return (
            f"{head}: per GPU, on each of the engine's {engine.gpus} ({parallel}): {self.prediction.summary()}; "
            "the tokens and concurrency are the whole engine's"
        )


def _spec(instance_type: str) -> aws_facts.InstanceSpec:
    return aws_facts.INSTANCE_SPECS[instance_type]


def _role(role: str, config: Mapping, override: ModelSpec | None) -> tuple[RoleView, ModelSpec, Engine]:
    """One role's view, its model's facts and the engine settings the fit predicts with."""
    model_id, source = model_of(config)
    spec = model_spec(model_id, source, override)
    view = view_of(role, config, lambda *_: spec.max_context)
    engine = Engine.from_engine_kwargs(view.engine_kwargs, view.max_model_len)
    if view.max_model_len_auto:
        # vLLM fits the context to the KV cache it finds: check only that a minimal context fits beside the weights.
        engine = replace(engine, max_model_len=MIN_CONTEXT_TOKENS)
    return view, spec, engine


def derives_max_num_seqs(model: ModelSpec, engine: Engine) -> bool:
    """Rendered for hybrid models with CUDA graphs (vLLM refuses a max_num_seqs above its blocks there);
    an attention-only model never refuses one (its scheduler admits what the blocks hold), so vLLM's
    default stays."""
    return model.hybrid and not engine.enforce_eager and engine.max_num_seqs is None


def render_max_num_seqs(
    document: dict, pools: Iterable[tuple[str, str]], override: ModelSpec | None
) -> tuple[dict, dict[str, int]]:
    """The serve document with max_num_seqs derived for each hybrid role that leaves it unset: the
    largest that fits the smallest GPU among the role's pools (`pools`: (role, instance type) pairs).
    Also returns what it derived, per role."""
    document = copy.deepcopy(document)
    types = _types_by_role(pools)
    derived = {}
    for role, config in llm_configs_by_role(document, "rendered").items():
        _, spec, engine = _role(role, config, override)
        if role not in types or not derives_max_num_seqs(spec, engine):
            continue
        seqs = largest_max_num_seqs(spec, engine, _spec(_smallest(types[role])))
        if seqs > 0:  # else the check names vLLM's reason
            config["engine_kwargs"]["max_num_seqs"] = derived[role] = seqs
    return document, derived


def _types_by_role(pools: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    types: dict[str, list[str]] = {}
    for role, instance_type in pools:
        types.setdefault(role, []).append(instance_type)
    return types


def _smallest(instance_types: Iterable[str]) -> str:
    return min(instance_types, key=lambda t: (_spec(t).gpu_memory_mib, t))


def fit_document(
    document: dict,
    instance_types: Mapping[str, str],
    override: ModelSpec | None = None,
    derived: Iterable[str] = (),
) -> dict[str, RoleFit]:
    """The prediction per role of a rendered serve document, without checking it (`derived`: the roles
    whose max_num_seqs the stack derived)."""
    fits = {}
    for role, config in llm_configs_by_role(document, "rendered").items():
        view, spec, engine = _role(role, config, override)
        model_id = view.model_id
        source = "derived" if role in derived else "vLLM default" if engine.max_num_seqs is None else "set"
        prediction = predict(spec, engine, _spec(instance_types[role]))
        fits[role] = RoleFit(role, model_id, instance_types[role], spec, engine, prediction, source)
    return fits


def check_fit(
    document: dict, instance_types: Mapping[str, str], efa_roles: set[str], override: ModelSpec | None
) -> dict[str, Prediction]:
    """Check every LLM config of a rendered serve document against its pool's instance type."""
    predictions = {}
    for role, config in llm_configs_by_role(document, "rendered").items():
        view, spec, engine = _role(role, config, override)
        predictions[role] = check_role(role, view.model_id, spec, engine, instance_types[role], role in efa_roles)
    return predictions


def parse_max_num_seqs(value: str | None) -> int | None:
    """The stack key maxNumSeqs (Pulumi hands values over as strings)."""
    if value is None:
        return None
    allowed = "a whole number of sequences per engine, 1 or more"
    try:
        seqs = int(value)
    except ValueError:
        raise ConfigError("maxNumSeqs", value, allowed) from None
    if seqs < 1:
        raise ConfigError("maxNumSeqs", seqs, allowed)
    return seqs


def fit_serving(
    document: dict,
    pools: Iterable[tuple[str, str]],
    efa_roles: set[str],
    override: ModelSpec | None,
    max_num_seqs: int | None = None,
) -> tuple[dict, tuple[str, ...]]:
    """What the stack does with a rendered serve document: set the stack's maxNumSeqs on every LLM
    config or derive max_num_seqs where it is rendered, check every role on every instance type of its
    pools, and describe the fit on the smallest GPU of each role (the lines `make plan` prints).
    `pools`: (role, instance type) pairs."""
    pools = list(pools)
    if max_num_seqs is not None:
        document = copy.deepcopy(document)
        for config in llm_configs_by_role(document, "rendered").values():
            config.setdefault("engine_kwargs", {})["max_num_seqs"] = max_num_seqs
    document, derived = render_max_num_seqs(document, pools, override)
    types = _types_by_role(pools)
    for instance_type in {t for ts in types.values() for t in ts}:
        own = {role: instance_type if instance_type in ts else _smallest(ts) for role, ts in types.items()}
        try:
            check_fit(document, own, efa_roles, override)
        except ConfigError as error:
            if max_num_seqs is None or not error.key.endswith(".max_num_seqs"):
                raise
            raise ConfigError("maxNumSeqs", max_num_seqs, f"{error.key}: {error.allowed}") from None
    fits = fit_document(document, {role: _smallest(ts) for role, ts in types.items()}, override, derived)
    return document, tuple(fit.line() for fit in fits.values())
