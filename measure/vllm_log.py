"""vLLM 0.26's own memory lines, read from an engine's log, and held against the fit's prediction.

Every pattern is a log format string of vLLM 0.26.0 (the PyPI wheel), named where it is logged:
- "Model loading took %s GiB memory and %.6f seconds": v1/worker/gpu_model_runner.py
  GPUModelRunner.load_model ("... GiB and ..." in the V2 runner, v1/worker/gpu/model_runner.py);
- "Available KV cache memory: %s GiB": v1/worker/gpu_worker.py Worker.determine_available_memory;
- "GPU KV cache size: %s tokens", "Maximum concurrency for %s tokens per request: %.2fx":
  v1/core/kv_cache_utils.py get_kv_cache_configs;
- "Setting attention block size to %d tokens ...", "Padding mamba page size by %.2f%% ...":
  platforms/interface.py Platform._align_hybrid_block_size;
- "Estimated CUDA graph memory: %.2f GiB total": gpu_model_runner.py profile_cudagraph_memory;
- "Directly load the compiled graph(s) for compile range %s from the cache" and "Compiling a graph for compile
  range %s takes %.2f s": compilation/backends.py (whether the profiling pass compiled, which sets the reserve);
- "... Actual usage is %s GiB for weight, %s GiB for peak activation, %s GiB for non-torch memory, and
  %s GiB for CUDAGraph memory ...": gpu_worker.py Worker.compile_or_warm_up_model;
- the refusals: "max_num_seqs (%d) exceeds available Mamba cache blocks (%d)" (config/compilation.py
  CompilationConfig.resolve_cudagraph_mode_and_sizes), "To serve at least one request with the model's
  max seq len" (kv_cache_utils.py _check_enough_kv_cache_memory), "No available memory for the cache
  blocks" (same), "is less than desired GPU memory utilization" (v1/worker/utils.py request_memory).
vLLM formats GiB with format_gib (vllm/utils/mem_utils.py): rounded to 2 decimals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

from ray_llm_eks.domain.fit import model_fit
from ray_llm_eks.domain.serving import fit_prediction

GIB = 1024**3
_NUM = r"(-?[\d.]+)"
_PATTERNS: dict[str, re.Pattern] = {
    "weights": re.compile(rf"Model loading took {_NUM} GiB(?: memory)? and {_NUM} seconds"),
    "kv_cache": re.compile(rf"Available KV cache memory: {_NUM} GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "block_size": re.compile(r"Setting attention block size to (\d+) tokens"),
    "mamba_padding": re.compile(r"Padding mamba page size by ([\d.]+)%"),
    "cudagraph_estimate": re.compile(rf"Estimated CUDA graph memory: {_NUM} GiB total"),
    "compile_cache_hit": re.compile(r"Directly load the compiled graph\(s\) for compile range"),
    "compiled": re.compile(r"Compiling a graph for compile range"),
    "usage": re.compile(
        rf"Desired GPU memory utilization is \({_NUM}, {_NUM} GiB\)\. Actual usage is {_NUM} GiB for weight, "
        rf"{_NUM} GiB for peak activation, {_NUM} GiB for non-torch memory, and {_NUM} GiB for CUDAGraph memory"
    ),
    "mamba_refusal": re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)"),
    "refusal": re.compile(
        r"(To serve at least one request with the model's max seq len.*?GiB\)\.|No available memory for the cache "
        r"blocks\.|Free memory on device .*? is less than desired GPU memory utilization \([^)]*\))"
    ),
}
# Where vLLM 0.26.0 logs each line, and literal pieces of its format string there: `make check-upstream`
# finds them in the pinned wheel (tools/upstream/checks_vllm.py; UPGRADING.md, vllm-kv-cache-fit).
LOGGED_BY: dict[str, tuple[str, tuple[str, ...]]] = {
    "weights": ("vllm/v1/worker/gpu_model_runner.py", ("Model loading took %s GiB memory and %.6f seconds",)),
    "kv_cache": ("vllm/v1/worker/gpu_worker.py", ("Available KV cache memory: %s GiB",)),
    "kv_tokens": ("vllm/v1/core/kv_cache_utils.py", ("GPU KV cache size: %s tokens",)),
    "concurrency": ("vllm/v1/core/kv_cache_utils.py", ("Maximum concurrency for %s tokens per request: %.2fx",)),
    "block_size": ("vllm/platforms/interface.py", ("Setting attention block size to %d tokens ",)),
    "mamba_padding": ("vllm/platforms/interface.py", ("Padding mamba page size by %.2f%% to ensure ",)),
    "cudagraph_estimate": ("vllm/v1/worker/gpu_model_runner.py", ("Estimated CUDA graph memory: %.2f GiB total",)),
    "compile_cache_hit": ("vllm/compilation/backends.py", ("Directly load the compiled graph(s) for compile range ",)),
    "compiled": ("vllm/compilation/backends.py", ("Compiling a graph for compile range %s takes %.2f s",)),
    "usage": (
        "vllm/v1/worker/gpu_worker.py",
        ("Desired GPU memory utilization is ", "Actual usage is ", "GiB for weight, ", "for peak activation, "),
    ),
    "mamba_refusal": (
        "vllm/config/compilation.py",
        ("exceeds available Mamba cache ", "blocks ({kv_cache_config.num_blocks})"),
    ),
    "refusal": (
        "vllm/v1/core/kv_cache_utils.py",
        ("To serve at least one request with the model's max seq len ", "No available memory for the cache blocks."),
    ),
    "refusal_free_memory": ("vllm/v1/worker/utils.py", ("is less than desired GPU memory utilization ",)),
    "weights_v2": ("vllm/v1/worker/gpu/model_runner.py", ("Model loading took %s GiB and %.6f seconds",)),
    "compile_total": ("vllm/compilation/monitor.py", ("torch.compile took %.2f s in total",)),
    "cudagraph_capture": ("vllm/v1/worker/gpu_model_runner.py", ("Graph capturing finished in %.0f secs, took ",)),
    "engine_init": ("vllm/v1/engine/core.py", ("init engine (profile, create kv cache, warmup model) took ",)),
}
# Ray and vLLM prefix a process's lines with "(EngineCore_DP0 pid=1234)" or "(ServeReplica:... pid=1234)".
_PID = re.compile(r"pid=(\d+)")
# The field each line fills: the same line twice in one process is the next engine's (a restart); a
# refusal may be logged twice (the error and its traceback), and is kept once.
_FIELD = {
    "weights": "weights_gib",
    "kv_cache": "kv_cache_gib",
    "kv_tokens": "kv_tokens",
    "concurrency": "concurrency",
    "block_size": "block_size",
    "mamba_padding": "mamba_padding_pct",
    "cudagraph_estimate": "cudagraph_estimate_gib",
    "usage": "activation_gib",
}


@dataclass
class EngineMemory:
    """What one engine start logged (None: not in the log)."""

    weights_gib: float | None = None
    load_seconds: float | None = None
    kv_cache_gib: float | None = None
    kv_tokens: int | None = None
    concurrency: float | None = None
    concurrency_len: int | None = None  # the max_model_len the concurrency is for
    block_size: int | None = None  # only logged when vLLM grows the block (hybrid models)
    mamba_padding_pct: float | None = None
    cudagraph_estimate_gib: float | None = None
    # True: the compiled graphs came from vLLM's compile cache; False: compiled during this start's profiling
    # pass (whose activation peak then includes the compile's, model_table.Measured.compile_cache).
    compile_cache: bool | None = None
    budget_gib: float | None = None  # "Desired GPU memory utilization is (u, X GiB)"
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_gib: float | None = None
    max_num_seqs: int | None = None  # from the Mamba refusal
    mamba_blocks: int | None = None  # from the Mamba refusal
    refused: str | None = None  # vLLM's reason for not starting, one line
    pid: str | None = field(default=None, repr=False)

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self) if f.name != "pid")

    @property
    def config_only(self) -> bool:
        """Only the lines logged while vLLM builds its config (another process than the engine's)."""
        return self.weights_gib is None and self.kv_cache_gib is None and self.refused is None

    def _take(self, kind: str, match: re.Match, line: str) -> None:
        g = match.groups()
        if kind == "weights":
            self.weights_gib, self.load_seconds = float(g[0]), float(g[1])
        elif kind == "kv_cache":
            self.kv_cache_gib = float(g[0])
        elif kind == "kv_tokens":
            self.kv_tokens = int(g[0].replace(",", ""))
        elif kind == "concurrency":
            self.concurrency_len, self.concurrency = int(g[0].replace(",", "")), float(g[1])
        elif kind == "block_size":
            self.block_size = int(g[0])
        elif kind == "mamba_padding":
            self.mamba_padding_pct = float(g[0])
        elif kind == "cudagraph_estimate":
            self.cudagraph_estimate_gib = float(g[0])
        elif kind in ("compile_cache_hit", "compiled"):
            self.compile_cache = kind == "compile_cache_hit"
        elif kind == "usage":
            self.budget_gib = float(g[1])
            self.activation_gib, self.non_torch_gib, self.cudagraph_gib = float(g[3]), float(g[4]), float(g[5])
        elif kind == "mamba_refusal":
            self.max_num_seqs, self.mamba_blocks = int(g[0]), int(g[1])
            self.refused = line[match.start() :].strip()
        elif kind == "refusal" and self.refused is None:
            self.refused = line[match.start() :].strip()


def parse(log_text: str) -> list[EngineMemory]:
    """Each engine start in the log, in order. Lines are grouped by the process id in their prefix
    when they have one; a line seen twice in one process starts a new engine. Lines of the config stage
    (the block size, logged before the engine loads, maybe by another process) join the next engine."""
    engines: list[EngineMemory] = []
    current: dict[str | None, EngineMemory] = {}
    pending: EngineMemory | None = None  # config-stage lines waiting for their engine
    for line in log_text.splitlines():
        for kind, pattern in _PATTERNS.items():
            match = pattern.search(line)
            if match is None:
                continue
            pid_match = _PID.search(line[: match.start()])
            pid = pid_match.group(1) if pid_match else None
            engine = current.get(pid)
            if engine is None or (kind in _FIELD and getattr(engine, _FIELD[kind]) is not None):
                engine = EngineMemory(pid=pid)
                current[pid] = engine
                engines.append(engine)
            engine._take(kind, match, line)
            break
    merged: list[EngineMemory] = []
    for engine in engines:
        if engine.config_only:
            pending = _merge(pending, engine) if pending else engine
            continue
        merged.append(_merge(engine, pending) if pending else engine)
        pending = None
    if pending is not None:
        merged.append(pending)
    return merged


# Where an engine's start spends its time, each phase as vLLM 0.26 times it itself (LOGGED_BY names the lines):
# loading the weights (the model runner's load_model, reading included), torch.compile (Dynamo and Inductor,
# or loading their cache), capturing CUDA graphs, and the whole engine init after loading (profiling, the KV
# cache, compile and capture: it includes the two before).
_STARTUP = {
    "load_s": re.compile(rf"Model loading took {_NUM} GiB(?: memory)? and {_NUM} seconds"),
    "compile_s": re.compile(rf"torch\.compile took {_NUM} s in total"),
    "cudagraph_s": re.compile(rf"Graph capturing finished in {_NUM} secs"),
    "engine_init_s": re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s"),
}


@dataclass(frozen=True)
class EngineStart:
    """Seconds of one engine's start by phase, as it logged them (None: not logged)."""

    load_s: float | None = None
    compile_s: float | None = None
    cudagraph_s: float | None = None
    engine_init_s: float | None = None

    def line(self) -> str:
        names = {"load_s": "weights", "compile_s": "torch.compile", "cudagraph_s": "CUDA graphs",
                 "engine_init_s": "engine init (compile and graphs included)"}  # fmt: skip
        told = [f"{names[f.name]} {value:.1f} s" for f in fields(self) if (value := getattr(self, f.name)) is not None]
        return ", ".join(told) or "no start timing in its log"


def startup(log_text: str) -> EngineStart:
    """The last engine start's phases in a replica's log (a restarted engine logs them again)."""
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        for name, pattern in _STARTUP.items():
            if match := pattern.search(line):
                found[name] = float(match.groups()[-1])
    return EngineStart(**found)


def _merge(into: EngineMemory, other: EngineMemory) -> EngineMemory:
    for f in fields(EngineMemory):
        if getattr(into, f.name) is None:
            setattr(into, f.name, getattr(other, f.name))
    return into


@dataclass(frozen=True)
class Figure:
    name: str
    predicted: float
    measured: float
    tolerance: float
    unit: str

    @property
    def ok(self) -> bool:
        return abs(self.predicted - self.measured) <= self.tolerance

    def line(self) -> str:
        fmt = "{:,.0f}" if self.unit in ("tokens", "blocks") else "{:.2f}"
        p, m, t = (fmt.format(x) for x in (self.predicted, self.measured, self.tolerance))
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: predicted {p}, measured {m} {self.unit} (+-{t})"


@dataclass(frozen=True)
class Verdict:
    agree: bool
    lines: tuple[str, ...]
    emulated: bool

    def __str__(self) -> str:
        head = "fit agrees with vLLM" if self.agree else "fit DISAGREES with vLLM"
        note = (
            " (emulated: a larger GPU at this GPU's budget; the real GPU's reserve may differ)" if self.emulated else ""
        )
        return "\n".join([head + note, *(f"  {line}" for line in self.lines)])


# Each logged GiB figure is rounded to 0.01 GiB (format_gib): half of it on top of every tolerance.
_ROUNDING_GIB = 0.005


def compare(
    measured: EngineMemory, predicted: fit_prediction.Prediction | model_fit.RoleFit, emulated: bool = False
) -> Verdict:
    """Does vLLM's own log agree with the prediction within the fit's tolerance? A RoleFit is compared
    at the max_num_seqs the engine ran with when its log names it (the Mamba refusal does), and for a
    start whose compiled graphs came from the compile cache when its log says so."""
    if isinstance(predicted, model_fit.RoleFit):
        seqs = measured.max_num_seqs
        predicted = predicted.at(seqs, compile_cache=bool(measured.compile_cache))
    p = predicted
    kv_tol = p.tolerance / GIB + _ROUNDING_GIB
    block_tol = kv_tol * GIB / p.layout.bytes_per_block
    per_request = p.blocks_per_request
    figures: list[Figure] = []
    problems: list[str] = []
    if measured.weights_gib is not None:
        figures.append(
            Figure(
                "weights",
                p.weights / GIB,
                measured.weights_gib,
                fit_prediction.WEIGHTS_TOLERANCE_GIB + _ROUNDING_GIB,
                "GiB",
            )
        )
    if measured.kv_cache_gib is not None:
        figures.append(Figure("KV cache memory", p.kv_cache / GIB, measured.kv_cache_gib, kv_tol, "GiB"))
    blocks = _measured_blocks(measured, per_request)
    if blocks is not None:
        figures.append(Figure("KV cache blocks", p.num_blocks, blocks, block_tol, "blocks"))
    if measured.kv_tokens is not None:
        figures.append(
            Figure(
                "GPU KV cache size",
                p.kv_tokens,
                measured.kv_tokens,
                block_tol / per_request * p.max_model_len,
                "tokens",
            )
        )
    if measured.concurrency is not None:
        if measured.concurrency_len not in (None, p.max_model_len):
            problems.append(
                f"FAIL concurrency logged for {measured.concurrency_len} tokens, predicted for {p.max_model_len}"
            )
        figures.append(
            Figure("maximum concurrency", p.concurrency, measured.concurrency, block_tol / per_request + 0.005, "x")
        )
    if measured.block_size is not None and measured.block_size != p.layout.block_size:
        problems.append(
            f"FAIL attention block size: predicted {p.layout.block_size}, measured {measured.block_size} tokens"
        )
    elif measured.block_size is not None:
        problems.append(f"ok   attention block size: {p.layout.block_size} tokens")
    # Agreement on starting: some KV cache memory within the tolerance gives vLLM's outcome.
    outcomes = {p.refusal(margin) is None for margin in (-p.tolerance, 0.0, p.tolerance)}
    started = measured.refused is None
    if started not in outcomes:
        said = measured.refused or "started"
        problems.append(f"FAIL start: predicted {p.refusal(0.0) or 'starts'!r}, vLLM {said!r}")
    else:
        problems.append(f"ok   start: vLLM {'started' if started else 'refused, as predicted'}")
    if not figures and measured.refused is None:
        problems.append("FAIL no memory line of vLLM 0.26 in the log")
    lines = tuple(f.line() for f in figures) + tuple(problems)
    agree = all(f.ok for f in figures) and not any(line.startswith("FAIL") for line in problems)
    return Verdict(agree, lines, emulated or p.emulated)


def _measured_blocks(measured: EngineMemory, per_request: int) -> int | None:
    """The pool's blocks: named by the Mamba refusal, else recovered from the logged concurrency
    (blocks / blocks per request, to 2 decimals) or tokens."""
    if measured.mamba_blocks is not None:
        return measured.mamba_blocks
    if measured.concurrency is not None:
        return round(measured.concurrency * per_request)
    return None
