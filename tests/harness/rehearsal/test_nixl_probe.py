"""The NIXL READ probe (rehearsal/nixl_probe.py) for real, in host memory on this CPU (the rehearsal venv's nixl):
two processes (or two Ray actors), READs one at a time and all at once, the data arrived, the figures it reports."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import ROOT
from tests.harness.rehearsal.test_rehearsal_isa import REHEARSAL_VENV

EXTRA_SITE = "/tmp/nixl-probe-extra-site"  # stands for the GPU machine's wheel folder; need not exist


@pytest.mark.skipif(
    not (REHEARSAL_VENV / ".installed").exists(), reason=f"no rehearsal venv at {REHEARSAL_VENV} (make rehearsal-venv)"
)
@pytest.mark.parametrize(
    "order",
    [[], ["--agent-first", "--threads", "0"], ["--ray"]],
    ids=["as-vllm", "agent-first-no-threads", "ray-actors"],
)
def test_reads_between_two_processes_arrive_and_say_how_they_queue(order):
    done = subprocess.run(
        [str(REHEARSAL_VENV / "bin" / "python"), "-m", "rehearsal.nixl_probe", "--device", "cpu", "--mib", "2",
         "--descriptors", "8", "--transfers", "3", *order],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=os.environ | {"PYTHONPATH": EXTRA_SITE},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-1500:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["data_arrived"] is True
    assert result["agent_first"] is ("--agent-first" in order)
    assert result["ucx_threads"] == (0 if "--threads" in order else 4)
    assert result["transfers"] == 3 and result["one_at_a_time_gb_per_s"] > 0 and result["all_at_once_ms"] > 0
    # How the reads queue is what the probe measures, not a property of the code: on a loaded 2-core host a 2 MiB
    # read's time is noise, so only its presence is held here.
    assert result["queueing_factor"] > 0, result
    if "--ray" in order:
        # Both sides in Ray actors started as Ray Serve LLM starts vLLM's GPU worker, which the result shows.
        assert result["between"] == "ray-actors" and result["setup_hook"] is True
        for side in (result["initiator"], result["target"]):
            assert side["env"]["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1", side
            assert any(lib.startswith("libucp") for lib in side["ucx_libraries"]), side
            # Where Ray comes from PYTHONPATH (the GPU machine's installed wheels), its actors keep that path.
            assert side["env"]["PYTHONPATH"].split(os.pathsep)[-1] == EXTRA_SITE, side
        assert result["initiator"]["pid"] != result["target"]["pid"]
    else:
        assert result["between"] == "processes"


@pytest.mark.skipif(not (REHEARSAL_VENV / ".installed").exists(), reason=f"no rehearsal venv at {REHEARSAL_VENV}")
def test_the_backends_a_serve_file_may_name_are_the_plugins_nixl_ships():
    """The pinned NIXL's plugins (the rehearsal venv holds the same nixl-cu13 as the image): a backend name of a serve
    file is checked against them before anything is created."""
    from ray_llm_eks.domain.serving.serve_config import NIXL_BACKENDS

    plugins = sorted(REHEARSAL_VENV.glob("lib/python3*/site-packages/nixl_cu13.libs/nixl/libplugin_*.so"))
    assert plugins, REHEARSAL_VENV
    assert {p.name.removeprefix("libplugin_").removesuffix(".so") for p in plugins} == set(NIXL_BACKENDS)
