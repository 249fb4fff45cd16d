"""What this machine's GPUs are, as CUDA sees them, read in a child process (a CUDA context opened in the
rehearsal's own process would hold GPU memory for the whole run, outside every engine's budget)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from rehearsal.gpu import GpuHere
from rehearsal.substitute import CannotRehearse

_PROBE = (
    "import json, torch\n"
    "n = torch.cuda.device_count()\n"
    "free, total = torch.cuda.mem_get_info(0) if n else (0, 0)\n"
    "print(json.dumps({'count': n, 'name': torch.cuda.get_device_name(0) if n else '', 'total': total}))\n"
)


def efa_present(infiniband: Path = Path("/sys/class/infiniband")) -> bool:
    """An EFA device: an RDMA device whose driver is `efa` (NIXL's LIBFABRIC backend needs one)."""
    for device in infiniband.glob("*") if infiniband.exists() else []:
        driver = device / "device" / "driver"
        if driver.exists() and driver.resolve().name == "efa":
            return True
    return False


def probe() -> GpuHere:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CannotRehearse(f"TARGET=gpu: CUDA is not usable here ({last[:300]})")
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if not seen["count"]:
        raise CannotRehearse("TARGET=gpu: no NVIDIA GPU visible to CUDA on this machine")
    return GpuHere(
        count=seen["count"],
        name=seen["name"],
        total_mib=seen["total"] // 2**20,
        efa=efa_present(),
        flashinfer=importlib.util.find_spec("flashinfer") is not None,
    )
