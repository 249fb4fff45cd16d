"""The hold plans (tools/gpu/holds/*.runs) as tools/gpu/device.sh runs them on the GPU machine: every rehearsal line
parses as `python -m rehearsal.run --target gpu` takes it, every spec it names is one the plan's kit writes, every
script a `cmd:` line runs is in the repository. A plan that fails there costs GPU minutes; here it costs seconds."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from rehearsal import checks
from rehearsal.prepare import kit_specs
from rehearsal.run import parser_for
from tests.conftest import ROOT

HOLDS = sorted((ROOT / "tools" / "gpu" / "holds").glob("*.runs"))
KIT_DIR = "/tmp/kit/kit/"  # where device.sh unpacks the kit on the GPU machine (its KIT folder's kit/)


def runs(plan: Path) -> list[str]:
    """The lines device.sh runs (its driver skips blank lines and `#` lines)."""
    return [line for line in plan.read_text().splitlines() if line.strip() and not line.startswith("#")]


def kit_of(plan: Path) -> str:
    (line,) = [line for line in plan.read_text().splitlines() if line.startswith("# kit: ")]
    return line.removeprefix("# kit: ")


def problems(plan: Path) -> list[str]:
    found = []
    specs = {f"{KIT_DIR}{name}.rayservice.json" for name in kit_specs(kit_of(plan))}
    parser = parser_for(checks.all_checks())
    for line in runs(plan):
        if line.startswith("cmd:"):
            scripts = [w for w in shlex.split(line.removeprefix("cmd:")) if w.endswith((".sh", ".py"))]
            found += [f"{line}: no {s} in the repository" for s in scripts if not (ROOT / s).is_file()]
            continue
        words = line.split()  # the driver passes the line unquoted: the shell splits it at spaces
        try:
            args = parser.parse_args(["--target", "gpu", "--save-logs", "/tmp/res/logs-1", *words])
        except SystemExit:
            found.append(f"{line}: rehearsal.run refuses it")
            continue
        if args.spec is not None and str(args.spec) not in specs:
            found.append(f"{line}: {args.spec} is not in its kit ({sorted(specs)})")
    return found


@pytest.mark.parametrize("plan", HOLDS, ids=[p.stem for p in HOLDS])
def test_every_line_of_a_hold_plan_runs_as_the_gpu_machine_runs_it(plan: Path):
    assert runs(plan), plan
    assert problems(plan) == []


def test_a_plan_line_the_rehearsal_refuses_or_a_spec_outside_its_kit_is_found(tmp_path: Path):
    bad = tmp_path / "bad.runs"
    bad.write_text(
        "# kit: dev\n"
        "--stack dev --spec /tmp/kit/kit/dev.rayservice.json --no-such-flag\n"
        "--stack dev --spec /tmp/kit/kit/baseline.rayservice.json --random-weights\n"
        "cmd:bash tools/gpu/missing.sh\n"
    )
    found = [line.split(": ", 1)[1] for line in problems(bad)]
    assert len(found) == 3, found
    assert found[0] == "rehearsal.run refuses it"
    assert found[1].startswith("/tmp/kit/kit/baseline.rayservice.json is not in its kit")
    assert found[2] == "no tools/gpu/missing.sh in the repository"
