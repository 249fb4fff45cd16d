"""The check of the load generator's entry: what measure/bench.py writes against AIPerf's own config schema."""

from __future__ import annotations

import json

from tools.upstream.context import Context, fingerprints
from tools.upstream.sources import Wheel, pinned


def check_aiperf_config(ctx: Context) -> list[str]:
    """Every key measure/bench.py writes is in AIPerf's own config schema, with the types we give them."""
    from measure import bench

    aiperf = ctx.source(Wheel, "aiperf", pinned("llmclient/bench-requirements.txt", "aiperf"))
    schema = json.loads(aiperf.read("aiperf/config/schema/aiperf-config.schema.json"))
    defs = schema.get("$defs", {})
    target = bench.Target("http://127.0.0.1:8000", "m", "m")
    problems = []
    for workload in (
        bench.Workload(),
        bench.Workload("multiturn", system_tokens=8),
        bench.Workload("dataset", dataset="x"),
    ):
        for kind in bench.SWEEP_KINDS:
            doc = bench.aiperf_config(target, workload, kind, 2, bench.Bounds(), 1, 1, 1, "out", True)["benchmark"]
            sections = {"endpoint": "EndpointConfig", "tokenizer": "TokenizerConfig", "artifacts": "ArtifactsConfig",
                        "runtime": "RuntimeConfig"}  # fmt: skip
            sections["dataset"] = "FileDataset" if workload.kind == "dataset" else "SyntheticDataset"
            for section, name in sections.items():
                unknown = set(doc[section]) - set(defs.get(name, {}).get("properties", {}))
                problems += [f"{aiperf}: {name} has no {sorted(unknown)}"] if unknown else []
            for phase in doc["phases"]:
                name = {"concurrency": "ConcurrencyPhase", "poisson": "PoissonPhase"}[phase["type"]]
                unknown = set(phase) - set(defs.get(name, {}).get("properties", {}))
                problems += [f"{aiperf}: {name} has no {sorted(unknown)}"] if unknown else []
    symbols = {"aiperf/common/models/record_models.py": ["RequestRecord"]}
    return sorted(set(problems)) + fingerprints("aiperf-config", ctx, aiperf, symbols, "python")
