"""The pack through pulumi-policy's own analyzer (the servicer the Pulumi CLI talks to over gRPC),
fed the resources of an offline plan, without the CLI: each resource as an AnalyzeRequest (what
`pulumi preview --policy-pack` sends before creating it), then the whole stack as an
AnalyzeStackRequest. Run it in the pack's venv (docs/security.md):

    make plan STACK=dev OUT=plan-dev && policy/venv/bin/python policy/sdk_check.py plan-dev/resources.json

Prints each violation the SDK reports; exit 1 if there is one. Uses the SDK's private
`_PolicyAnalyzerServicer` (pulumi-policy 1.21.0, pinned in requirements.txt)."""

import json
import runpy
import sys
from pathlib import Path

import pulumi_policy
from google.protobuf import struct_pb2
from pulumi.runtime import proto
from pulumi_policy.policy import _PolicyAnalyzerServicer


def _pack() -> _PolicyAnalyzerServicer:
    """Run policy/__main__.py with PolicyPack captured instead of serving gRPC."""
    captured = {}

    def capture(name, policies, enforcement_level=None, **_):
        captured.update(name=name, policies=policies, level=enforcement_level)

    pulumi_policy.PolicyPack = capture
    runpy.run_path(str(Path(__file__).resolve().parent / "__main__.py"))
    return _PolicyAnalyzerServicer(captured["name"], "0.0.1", captured["policies"], captured["level"])


def _struct(props: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(props)
    return struct


def main(resources_json: str) -> int:
    rows = json.loads(Path(resources_json).read_text())
    rows = [r for r in rows if not r["type"].startswith("pulumi:providers:")]
    servicer = _pack()
    diagnostics = []
    for row in rows:
        request = proto.AnalyzeRequest(
            type=row["type"], properties=_struct(row["inputs"]), urn=row["urn"], name=row["name"]
        )
        diagnostics += [(row["name"], d) for d in servicer.Analyze(request, None).diagnostics]
    stack = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                type=r["type"],
                properties=_struct(r["inputs"]),
                urn=r["urn"],
                name=r["name"],
                parent=r["parent"] or "",
                dependencies=r["dependencies"],
            )
            for r in rows
        ]
    )
    diagnostics += [(d.urn.rsplit("::", 1)[-1] or "(stack)", d) for d in servicer.AnalyzeStack(stack, None).diagnostics]
    mandatory = [d for _, d in diagnostics if d.enforcementLevel != proto.ADVISORY]
    for name, d in diagnostics:
        level = "advisory" if d.enforcementLevel == proto.ADVISORY else "mandatory"
        print(f"policy {d.policyName} ({level}): {name}: {d.message.splitlines()[-1]}")
    print(f"{len(rows)} resources through pulumi-policy's analyzer: {len(mandatory)} mandatory violation(s)")
    return 1 if mandatory else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
