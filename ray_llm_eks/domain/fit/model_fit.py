"""Will the model fit, and how many sequences can it run? Weights, runtime memory and the KV cache
pool against the GPUs of each role's pool, checked offline before any resource is declared (instead of
Ray workers crash-looping on the GPU nodes 25 minutes into `pulumi up`).

Per GPU, as vLLM 0.26 counts it (v1/worker/gpu_worker.py Worker.determine_available_memory):

    budget   = GPU memory x gpu_memory_utilization        (the CUDA context comes on top)
    KV cache = budget - weights - runtime reserve         (activation peak + non-torch + CUDA graphs)
    blocks   = KV cache // (page x layers per group)      (ray_llm_eks/domain/serving/vllm_fit.py: vLLM's own
    arithmetic)

The runtime reserve depends on max_num_seqs (more CUDA graphs, larger sampler buffers) and on whether the
start compiles: the profiling pass of a start without vLLM's compile cache holds torch.compile's own memory
in its activation peak, so a cold start (every new node) has the least KV cache and decides whether vLLM
starts; a restart that loads the compiled graphs from the cache gets more. And a hybrid
model needs one block per running sequence before vLLM captures its CUDA graphs; so the largest
max_num_seqs that fits is a fixed point: s <= blocks(s). It is derived and rendered for hybrid models,
and an explicit one that cannot fit is refused with vLLM's own reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ray_llm_eks.domain.core.errors import UNSET, ConfigError, in_serve_config, yaml_text
from ray_llm_eks.domain.platform import aws_facts
from ray_llm_eks.domain.platform.aws_facts import INSTANCE_SPECS, InstanceTable
from ray_llm_eks.domain.serving import vllm_fit
from ray_llm_eks.domain.serving.fields import ensure, put
from ray_llm_eks.domain.serving.fit_prediction import (
    CUDA_CONTEXT_GIB,
    MIN_CONTEXT_TOKENS,
    Engine,
    Prediction,
    gib_text,
    heads_refusal,
    largest_max_num_seqs,
    predict,
)
from ray_llm_eks.domain.serving.llm_config import LlmConfig
from ray_llm_eks.domain.serving.model_table import GIB, MIB, ModelSpec, model_spec
from ray_llm_eks.domain.serving.role_view import RoleView, view_of
from ray_llm_eks.domain.serving.serve_app import ServeDocument
from ray_llm_eks.domain.serving.serve_config import check_tensor_parallel, serve_config_names, shipped_document

# How a line names the serve config the fit checks: rendered from the stack's serveConfig file and keys.
SERVED = "the served document"


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


def _hosts(model: ModelSpec, engine: Engine, need_efa: bool, table: InstanceTable) -> list[str]:
    """Instance types (of the stack's table) on which this engine fits, smallest first."""
    fitting = [
        (spec.gpus, spec.gpu_memory_mib, spec.vcpus, name)
        for name, spec in table.items()
        if accepted(model, engine, spec, need_efa)
    ]
    return [name for *_, name in sorted(fitting)]


def _alternatives(
    model: ModelSpec,
    engine: Engine,
    prediction: Prediction,
    role: str,
    need_efa: bool,
    prices: Mapping[str, float],
    table: InstanceTable,
) -> list[str]:
    """What would fit: a shorter context on this GPU, else the cheapest instance types (at this region's prices)
    on which the engine fits at its tensor-parallel size or a larger one the model's heads allow."""
    ideas = []
    longest = prediction.layout.longest_context(prediction.num_blocks_low)
    if 0 < longest < engine.max_model_len:
        ideas.append(f"max_model_len <= {longest} on this GPU")
    options = []
    for tp in sorted({engine.tensor_parallel, 2, 4, 8}):
        if tp >= engine.tensor_parallel:
            for name in _hosts(model, replace(engine, tensor_parallel=tp), need_efa, table):
                options.append((name not in prices, prices.get(name, 0.0), tp, name))
    cheapest = []
    for unpriced, price, tp, name in sorted(options)[:3]:
        wider = "" if tp == engine.tensor_parallel else f" with {role} engine_kwargs.tensor_parallel_size {tp}"
        cheapest.append(f"{name}{wider} ({'no price here' if unpriced else f'{price:.2f} $/h a node'})")
    if cheapest:
        ideas.append(f"gpuPools.{role}.instanceType, cheapest first: {', '.join(cheapest)}")
        shipped = _shipped_tensor_parallel(role)
        sizes = sorted({tp for *_, tp, _ in sorted(options)[:3] if tp in shipped and tp != engine.tensor_parallel})
        ideas += [f"serveConfig {shipped[tp]} sets tensor_parallel_size {tp}" for tp in sizes]
    return ideas


def _shipped_tensor_parallel(role: str) -> dict[int, str]:
    """tensor_parallel_size -> a shipped serve config that sets it for `role` (the way to a wider engine without
    writing a serve file)."""
    found: dict[int, str] = {}
    for name in sorted(serve_config_names(), reverse=True):
        config = shipped_document(name).roles.get(role, LlmConfig())
        found[config.engine.tensor_parallel] = name
    return found


def _fewer_sequences(model: ModelSpec, engine: Engine, spec: aws_facts.InstanceSpec) -> int:
    """The largest max_num_seqs below the engine's own at which vLLM would start on this GPU (0: none does):
    fewer sequences reserve less runtime memory (CUDA graphs, sampler buffers) and, for a hybrid model, need
    fewer Mamba blocks. A hybrid model's is the stack's derived one (its start margin kept)."""
    if engine.max_num_seqs is None:
        return 0
    if model.hybrid and not engine.enforce_eager:
        return min(largest_max_num_seqs(model, replace(engine, max_num_seqs=None), spec), engine.max_num_seqs - 1)
    low, high = 0, engine.max_num_seqs - 1  # the refusal only grows with max_num_seqs: bisect
    while low < high:
        middle = (low + high + 1) // 2
        if predict(model, replace(engine, max_num_seqs=middle), spec).refusal() is None:
            low = middle
        else:
            high = middle - 1
    return low


def check_role(
    role: str,
    model_id: str,
    model: ModelSpec,
    engine: Engine,
    instance_type: str,
    need_efa: bool,
    prices: Mapping[str, float] | None = None,
    table: InstanceTable = INSTANCE_SPECS,
) -> Prediction:
    """Raise ConfigError if one role's LLM config cannot run on its pool's instance type: vLLM would
    refuse to start (its reason in the message) at the low end of the fit's tolerance. A refusal names what
    to change: max_num_seqs where fewer sequences would start, else the pool's instance type (the cheapest
    that fits at `prices`, this region's $/h by type, among `table`: the stack's instance types) or the context."""
    spec = table[instance_type]
    if engine.max_model_len > model.max_context:
        raise ConfigError(
            "maxModelLen", engine.max_model_len, f"at most {model.max_context}, the maximum context of {model_id}"
        )
    check_tensor_parallel(role, instance_type, spec.gpus, engine.tensor_parallel)
    check_heads(role, model_id, model, engine, spec, instance_type, need_efa)
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
    would = "would" if central else f"may (within the fit's tolerance, -{gib_text(prediction.tolerance)} KV cache)"
    # Short by: what one request at max_model_len still lacks, at the low end of the tolerance.
    one_request = prediction.blocks_per_request * prediction.layout.bytes_per_block
    short = one_request - (prediction.kv_cache - prediction.tolerance)
    short_by = f", short by {gib_text(short)} for one request at max_model_len" if short > 0 else ""
    predicted = f"(predicted {prediction.summary()}{short_by})"
    refused = f"vLLM {vllm_fit.VLLM_VERSION} {would} refuse to start: '{reason}' {predicted}"
    fewer = _fewer_sequences(model, engine, spec)
    if fewer:
        unset = " or leave it unset (the stack derives it)" if model.hybrid else ""
        raise in_serve_config(
            SERVED,
            f"{role} engine_kwargs.max_num_seqs",
            engine.max_num_seqs,
            f"at most {fewer} for {model_id} on {instance_type} ({spec.gpu_model}){unset}: each sequence reserves "
            f"runtime memory{' and a Mamba block' if model.hybrid else ''}; at {engine.max_num_seqs} {refused}",
        )
    ideas = "; ".join(_alternatives(model, engine, prediction, role, need_efa, prices or {}, table))
    allowed = (
        f"{model_id} does not fit the {role} GPU ({spec.gpu_model}) with {_described(engine)}: {refused}. "
        f"Would fit: {ideas or 'nothing in our instance table'}"
    )
    raise ConfigError(f"gpuPools.{role}", instance_type, allowed)


# The config.json names of the head counts a modelSpec gives for vLLM's tensor-parallel rules.
_HEAD_FIELDS = {
    "attentionHeads": "num_attention_heads",
    "linearKeyHeads": "linear_num_key_heads",
    "linearValueHeads": "linear_num_value_heads",
}


def check_heads(
    role: str,
    model_id: str,
    model: ModelSpec,
    engine: Engine,
    spec: aws_facts.InstanceSpec,
    instance_type: str,
    need_efa: bool,
) -> None:
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
    config: LlmConfig,
    role: str,
    instance_type: str,
    need_efa: bool,
    override: ModelSpec | None,
    derived: bool,
    tensor_parallel: int | None = None,
    table: InstanceTable = INSTANCE_SPECS,
) -> bool:
    """Whether check_role passes one role's rendered LLM config on `instance_type` (with another
    tensor_parallel_size): what a suggestion must pass. A derived max_num_seqs is derived again for that
    type, as the stack would."""
    view, spec, engine = _role(role, config, override)
    model_id = view.model_id
    if tensor_parallel is not None:
        engine = replace(engine, tensor_parallel=tensor_parallel)
    if derived:
        seqs = largest_max_num_seqs(spec, replace(engine, max_num_seqs=None), table[instance_type])
        engine = replace(engine, max_num_seqs=seqs or None)
    try:
        check_role(role, model_id, spec, engine, instance_type, need_efa, table=table)
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
    instance: aws_facts.InstanceSpec = field(repr=False)
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
        return predict(self.model, engine, self.instance)

    def line(self) -> str:
        gpu = self.instance.gpu_model
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


def _role(role: str, config: LlmConfig, override: ModelSpec | None) -> tuple[RoleView, ModelSpec, Engine]:
    """One role's view, its model's facts and the engine settings the fit predicts with."""
    spec = model_spec(*config.model.id_and_source, override)
    view = view_of(role, config, lambda *_: spec.max_context)
    engine = Engine.of(view.engine, view.max_model_len)
    if view.max_model_len_auto:
        # vLLM fits the context to the KV cache it finds: check only that a minimal context fits beside the weights.
        engine = replace(engine, max_model_len=MIN_CONTEXT_TOKENS)
    return view, spec, engine


def derives_max_num_seqs(model: ModelSpec, engine: Engine) -> bool:
    """Rendered for hybrid models with CUDA graphs (vLLM refuses a max_num_seqs above its blocks there);
    an attention-only model never refuses one (its scheduler admits what the blocks hold), so vLLM's
    default stays."""
    return model.hybrid and not engine.enforce_eager and engine.max_num_seqs is None


def derive_max_num_seqs(
    doc: ServeDocument,
    pools: Iterable[tuple[str, str]],
    override: ModelSpec | None,
    table: InstanceTable = INSTANCE_SPECS,
) -> dict[str, int]:
    """max_num_seqs for each hybrid role of a rendered serve document that leaves it unset: the largest that
    fits the smallest GPU among the role's pools (`pools`: (role, instance type) pairs). A role none fits is
    left out: the check names vLLM's reason."""
    types = _types_by_role(pools)
    derived = {}
    for role, config in doc.roles.items():
        _, spec, engine = _role(role, config, override)
        if role not in types or not derives_max_num_seqs(spec, engine):
            continue
        seqs = largest_max_num_seqs(spec, engine, table[_smallest(types[role], table)])
        if seqs > 0:
            derived[role] = seqs
    return derived


def with_max_num_seqs(doc: ServeDocument, seqs_by_role: Mapping[str, int]) -> ServeDocument:
    """The document with each role of `seqs_by_role` running that many sequences per engine."""

    def with_seqs(role: str, config: LlmConfig) -> LlmConfig:
        if role not in seqs_by_role:
            return config
        config = ensure(config, "engine_kwargs")
        return put(config, engine_kwargs=put(config.engine, max_num_seqs=seqs_by_role[role]))

    return doc.map_roles(with_seqs)


def _types_by_role(pools: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    types: dict[str, list[str]] = {}
    for role, instance_type in pools:
        types.setdefault(role, []).append(instance_type)
    return types


def _smallest(instance_types: Iterable[str], table: InstanceTable) -> str:
    return min(instance_types, key=lambda t: (table[t].gpu_memory_mib, t))


def fit_document(
    doc: ServeDocument,
    instance_types: Mapping[str, str],
    override: ModelSpec | None = None,
    derived: Iterable[str] = (),
    table: InstanceTable = INSTANCE_SPECS,
) -> dict[str, RoleFit]:
    """The prediction per role of a rendered serve document, without checking it (`derived`: the roles
    whose max_num_seqs the stack derived)."""
    fits = {}
    for role, config in doc.roles.items():
        view, spec, engine = _role(role, config, override)
        model_id = view.model_id
        source = "derived" if role in derived else "vLLM default" if engine.max_num_seqs is None else "set"
        instance = table[instance_types[role]]
        prediction = predict(spec, engine, instance)
        fits[role] = RoleFit(role, model_id, instance_types[role], instance, spec, engine, prediction, source)
    return fits


def check_fit(
    doc: ServeDocument,
    instance_types: Mapping[str, str],
    efa_roles: set[str],
    override: ModelSpec | None,
    prices: Mapping[str, float] | None = None,
    table: InstanceTable = INSTANCE_SPECS,
) -> dict[str, Prediction]:
    """Check every LLM config of a rendered serve document against its pool's instance type (`prices`: $/h by
    instance type in the stack's region, to name the cheapest type that fits)."""
    predictions = {}
    for role, config in doc.roles.items():
        view, spec, engine = _role(role, config, override)
        efa = role in efa_roles
        predictions[role] = check_role(role, view.model_id, spec, engine, instance_types[role], efa, prices, table)
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


@dataclass(frozen=True)
class FitResult:
    """A rendered serve document fitted to its pools."""

    document: ServeDocument  # with the stack's maxNumSeqs, or the derived max_num_seqs, on its LLM configs
    lines: tuple[str, ...]  # the fit on the smallest GPU of each role: what `make plan` prints
    derived: Mapping[str, int]  # the max_num_seqs the stack derived, per role


def fit_serving(
    doc: ServeDocument,
    pools: Iterable[tuple[str, str]],
    efa_roles: set[str],
    override: ModelSpec | None,
    max_num_seqs: int | None = None,
    prices: Mapping[str, float] | None = None,
    table: InstanceTable = INSTANCE_SPECS,
) -> FitResult:
    """What the stack does with a rendered serve document: set the stack's maxNumSeqs on every LLM
    config or derive max_num_seqs where it is rendered, check every role on every instance type of its
    pools, and describe the fit on the smallest GPU of each role (the lines `make plan` prints).
    `pools`: (role, instance type) pairs; `prices`: $/h by instance type in the stack's region; `table`: the
    stack's instance types (ours and its instanceTypes)."""
    pools = list(pools)
    if max_num_seqs is not None:
        doc = with_max_num_seqs(doc, dict.fromkeys(doc.roles, max_num_seqs))
    derived = derive_max_num_seqs(doc, pools, override, table)
    doc = with_max_num_seqs(doc, derived)
    types = _types_by_role(pools)
    for instance_type in {t for ts in types.values() for t in ts}:
        own = {role: instance_type if instance_type in ts else _smallest(ts, table) for role, ts in types.items()}
        try:
            check_fit(doc, own, efa_roles, override, prices, table)
        except ConfigError as error:
            if max_num_seqs is None or not error.key.endswith(".max_num_seqs"):
                raise
            raise ConfigError("maxNumSeqs", max_num_seqs, error.allowed) from None
    smallest = {role: _smallest(ts, table) for role, ts in types.items()}
    fits = fit_document(doc, smallest, override, derived, table)
    return FitResult(doc, tuple(fit.line() for fit in fits.values()), MappingProxyType(derived))
