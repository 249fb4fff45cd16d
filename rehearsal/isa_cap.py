"""The oneDNN ISA cap of a rehearsal's CPU engines, chosen from what this host executes, asked anew each run.

On some hosts that report AMX or AVX512-FP16 (an Intel Xeon with `amx_bf16 amx_tile avx512_fp16`) the engine's
worker died at its first forward pass of an invalid opcode (SIGILL), and ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
let it run; on another, a Gated DeltaNet layer after a linear layer trapped in oneDNN's AMX code (`tilezero`)
while the matmuls alone ran. CPUID alone cannot tell (it reported the features that trapped), so
rehearsal/isa_probe.py runs the engines' oneDNN kernels in a child process: first as the environment has
ONEDNN_MAX_CPU_ISA (unset: the host's default), then under each lower cap of LADDER, until one does not die of a
fault signal. Nothing is cached: another host (or another kernel, hypervisor) may answer otherwise."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ENV = "ONEDNN_MAX_CPU_ISA"
# oneDNN's documented values, highest first (its "CPU Dispatcher Control" guide; oneDNN 3.10 as bundled with
# torch 2.11 and vLLM 0.26 accepts the AVX512_CORE_AMX and AVX512_CORE_FP16 names as aliases): each drops the
# newest instructions of the one before it (AMX-FP16, AMX, AVX512-FP16, bf16, VNNI, AVX-512).
LADDER = ("AVX512_CORE_AMX", "AVX512_CORE_FP16", "AVX512_CORE_BF16", "AVX512_CORE_VNNI", "AVX512_CORE", "AVX2")
# The signals an instruction raises in the process that runs it; any other came from outside (the OOM killer,
# a user), which a lower ISA would not avoid.
FAULTS = frozenset({signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE})
PROBE = Path(__file__).resolve().parent / "isa_probe.py"
TIMEOUT_S = 60.0  # a few seconds each on an idle host (torch and vLLM's kernels imported); 2 loaded cores: ~6 s


@dataclass(frozen=True)
class Outcome:
    """One probe run under `cap` (None: ONEDNN_MAX_CPU_ISA unset)."""

    cap: str | None
    returncode: int | None  # None: it ran past the timeout (and was killed)
    isa: str = ""  # oneDNN's own name of the ISA it dispatched to (its verbose `info,cpu,isa:` line)
    step: str = ""  # the last step the probe began
    reason: str = ""  # the last line it wrote to stderr
    seconds: float = 0.0
    steps: tuple[str, ...] = ()  # every step it began, in order

    @property
    def signal(self) -> signal.Signals | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode)
        except ValueError:
            return None

    @property
    def faulted(self) -> bool:
        """Died of a signal an instruction raises: a lower cap may avoid it."""
        return self.signal in FAULTS

    def said(self) -> str:
        at = f" at {self.step!r}" if self.step else ""
        if self.returncode is None:
            return f"ran past its timeout ({self.seconds:.0f} s){at} without dying"
        if self.signal is not None:
            return f"died of {self.signal.name}{at}"
        if self.returncode:
            return f"failed (exit {self.returncode}{at}: {self.reason[:160] or 'no reason written'})"
        return "ran"


def name(cap: str | None) -> str:
    return "oneDNN's default" if cap is None else cap


@dataclass(frozen=True)
class Choice:
    """The cap the engines get (None: ONEDNN_MAX_CPU_ISA unset), and the probe runs that chose it."""

    cap: str | None
    outcomes: tuple[Outcome, ...]

    def line(self) -> str:
        """One line: the choice, and why."""
        last = self.outcomes[-1]
        setting = f"{ENV}={self.cap}" if self.cap else f"{ENV} unset"
        isa = f" ({last.isa})" if last.isa else ""
        tried = "; ".join(f"{name(o.cap)}{f' ({o.isa})' if o.isa else ''} {o.said()}" for o in self.outcomes[:-1])
        secs = f"{sum(o.seconds for o in self.outcomes):.1f} s"
        probe = f"the probe of the engines' oneDNN matmuls (rehearsal/isa_probe.py, {secs})"
        if last.faulted:
            every = "; ".join(filter(None, [tried, f"{name(last.cap)}{isa} {last.said()}"]))
            return f"{setting}: {probe} died of a fault signal under every cap: {every}; no cap helps here"
        if last.signal is not None:
            return f"{setting}: {probe} {last.said()} under {name(last.cap)}, not by an instruction: no cap chosen"
        before = f"{tried}; " if tried else ""
        return f"{setting}: {probe}: {before}{name(last.cap)}{isa} {last.said()}"


def rungs(start: str | None) -> list[str | None]:
    """What is tried, in order: the environment's own setting, then each cap of LADDER below it."""
    below = LADDER[LADDER.index(start) + 1 :] if start in LADDER else LADDER
    return [start, *below]


def choose(run: Callable[[str | None], Outcome], start: str | None) -> Choice:
    """The first rung whose probe did not die of a fault signal. A probe killed from outside stops the search
    (the environment's setting stays); so does a timeout or a failure, which did not trap (its cap is kept)."""
    outcomes: list[Outcome] = []
    for cap in rungs(start):
        outcome = run(cap)
        outcomes.append(outcome)
        if outcome.faulted:
            continue
        if outcome.signal is not None:
            return Choice(start, tuple(outcomes))
        return Choice(cap, tuple(outcomes))
    return Choice(start, tuple(outcomes))


def run_probe(
    cap: str | None, env: dict[str, str], command: list[str] | None = None, timeout: float = TIMEOUT_S
) -> Outcome:
    """rehearsal/isa_probe.py under this Python (or `command`) in a child with `env`, ONEDNN_MAX_CPU_ISA=`cap`
    (unset: None) and oneDNN's verbose info lines on."""
    child = {k: v for k, v in env.items() if k != ENV}
    if cap is not None:
        child[ENV] = cap
    child["ONEDNN_VERBOSE"] = "1"
    started = time.monotonic()
    try:
        done = subprocess.run(
            command or [sys.executable, str(PROBE)], env=child, capture_output=True, text=True, timeout=timeout
        )
        out, err, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # subprocess.run killed the child
        out, err, code = _text(exc.stdout), _text(exc.stderr), None
    steps = [line[len("step: ") :] for line in out.splitlines() if line.startswith("step: ")]
    isas = dict.fromkeys(line.split(",isa:", 1)[1].strip() for line in out.splitlines() if ",info,cpu,isa:" in line)
    return Outcome(
        cap,
        code,
        isa=" / ".join(isas),
        step=steps[-1] if steps else "",
        reason=(err.strip().splitlines() or [""])[-1],
        seconds=time.monotonic() - started,
        steps=tuple(steps),
    )


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def cap_for(env: dict[str, str], python: str = sys.executable) -> Choice:
    """Probe this host now, with the engines' environment `env` and their Python (the rehearsal venv's)."""
    return choose(lambda cap: run_probe(cap, env, [python, str(PROBE)]), env.get(ENV) or None)
