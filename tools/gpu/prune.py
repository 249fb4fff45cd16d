"""Rewrite a wheel without the files a GPU rehearsal on Hopper never loads, so the set fits fewer device calls
(64 MiB each). Each entry is removed from the archive and from the wheel's RECORD, so pip installs it as a
whole wheel. Usage: python tools/gpu/prune.py WHEEL... (in place; prints the sizes)."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

# wheel name prefix -> paths inside it that are left out, and why
PRUNE = {
    "vllm-": [
        # FlashAttention 2 kernels: vLLM 0.26 uses FlashAttention 3 on Hopper (SM 9.0).
        (r"^vllm/vllm_flash_attn/_vllm_fa2_C\.abi3\.so$", "FlashAttention 2 (vLLM uses FA3 on Hopper)"),
        (r"^vllm/third_party/deep_gemm/", "DeepGEMM (FP8 MoE kernels; bf16 dense model)"),
        (r"^vllm/third_party/fmha_sm100/", "Blackwell (SM 10.0) attention kernels"),
        (r"^vllm/vllm-rs$", "vLLM's Rust command-line front end (Ray Serve LLM runs vLLM in Python)"),
    ],
    "ray-": [(r"^ray/jars/", "Java workers' jars")],
    "nixl_cu13-": [
        (r"^nixl_ep_cu13/", "NIXL expert-parallel kernels (no MoE expert parallelism here)"),
        (r"libucx_perftest|/perftest", "UCX's perftest library"),
    ],
}


def prune(wheel: Path) -> tuple[int, int, list[str]]:
    rules = next((r for prefix, r in PRUNE.items() if wheel.name.startswith(prefix)), None)
    before = wheel.stat().st_size
    if rules is None:
        return before, before, []
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        dropped = [n for n in names if any(re.search(pattern, n) for pattern, _ in rules)]
        if not dropped:
            return before, before, []
        out = wheel.with_suffix(".pruned")
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename in dropped:
                    continue
                data = source.read(info.filename)
                if info.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines()
                    data = ("\n".join(ln for ln in lines if ln.split(",")[0] not in dropped) + "\n").encode()
                target.writestr(info, data)
    out.replace(wheel)
    reasons = sorted({why for pattern, why in rules if any(re.search(pattern, n) for n in dropped)})
    return before, wheel.stat().st_size, reasons


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        before, after, reasons = prune(Path(arg))
        if reasons:
            print(f"{Path(arg).name}: {before / 2**20:.1f} -> {after / 2**20:.1f} MiB (left out: {'; '.join(reasons)})")
