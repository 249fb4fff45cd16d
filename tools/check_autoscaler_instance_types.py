"""Compare the instance table the e2e's template node uses (ray_llm_eks/domain/platform/aws_facts.py INSTANCE_SPECS)
with the Cluster Autoscaler's own (cloudprovider/aws/ec2_instance_types.go `InstanceTypes`, read by
aws_manager.go buildNodeFromTemplate for a scale-up from zero). The Go module proxy does not serve
k8s.io/autoscaler/cluster-autoscaler, so `make e2e` cannot read that table: this re-checks ours by
hand at each autoscaler bump (UPGRADING.md). Exit 1 naming every difference.

    python tools/check_autoscaler_instance_types.py PATH/TO/ec2_instance_types.go
    git -C autoscaler show cluster-autoscaler-1.35.2:cluster-autoscaler/cloudprovider/aws/ec2_instance_types.go \\
        | python tools/check_autoscaler_instance_types.py -
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_llm_eks.domain.platform.aws_facts import INSTANCE_SPECS

ENTRY = re.compile(
    r'"(?P<name>[^"]+)":\s*\{\s*InstanceType:\s*"[^"]+",\s*VCPU:\s*(?P<vcpu>\d+),\s*MemoryMb:\s*(?P<mem>\d+),'
    r'\s*GPU:\s*(?P<gpu>\d+),\s*Architecture:\s*"(?P<arch>\w+)"'
)
ARCH = "amd64"  # every type in our table is x86_64 (e2e/template_node.py ARCH)


def autoscaler_table(go_source: str) -> dict[str, tuple[int, int, int, str]]:
    """name -> (vCPUs, MiB, GPUs, architecture), as InstanceTypes lists them."""
    return {m["name"]: (int(m["vcpu"]), int(m["mem"]), int(m["gpu"]), m["arch"]) for m in ENTRY.finditer(go_source)}


def differences(go_source: str) -> list[str]:
    theirs = autoscaler_table(go_source)
    found = []
    for name, spec in sorted(INSTANCE_SPECS.items()):
        ours = (spec.vcpus, spec.memory_gib * 1024, spec.gpus, ARCH)
        if name not in theirs:
            found.append(f"{name}: not in the autoscaler's table (a scale-up from zero cannot build its node)")
        elif theirs[name] != ours:
            found.append(f"{name}: ours (vCPU, MiB, GPU, arch) {ours}, the autoscaler's {theirs[name]}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    source = sys.stdin.read() if argv[0] == "-" else Path(argv[0]).read_text()
    if not autoscaler_table(source):
        print("no InstanceTypes entry found: not ec2_instance_types.go, or its layout changed")
        return 1
    found = differences(source)
    for line in found:
        print(line)
    print(f"{len(INSTANCE_SPECS) - len(found)}/{len(INSTANCE_SPECS)} instance types agree with the autoscaler's table")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
