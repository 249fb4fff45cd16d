"""botocore's facts (instance type names, EKS log types, log retention periods, partitions and
regions), read from botocore's own API models and endpoint data, cached per botocore version, and
handed to ray_llm_eks/domain/ as one frozen ray_llm_eks.domain.platform.aws_facts.BotocoreFacts.

A machine without botocore (the GPU machine of the rehearsal: tools/gpu/wheels.txt leaves it out) reads
the newest facts a machine with botocore cached, carried into its cache folder (tools/gpu/device.sh):
`make verify` and the bench then check the stack as `make plan` did."""

from __future__ import annotations

import json
import os
import re
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ray_llm_eks.adapters import environment
from ray_llm_eks.domain.platform.aws_facts import BotocoreFacts, Partition


def read_botocore() -> dict:
    """What the checks read from botocore's models, as JSON-ready values. Loading the EC2 model
    alone takes ~0.5 s."""
    import botocore.loaders  # here, not at the top: a cached read never imports botocore

    loader = botocore.loaders.Loader()
    ec2, eks, logs = (loader.load_service_model(name, "service-2")["shapes"] for name in ("ec2", "eks", "logs"))
    # CloudWatch Logs lists retention periods in the `Days` shape's prose, not as an enum.
    retention = logs["Days"]["documentation"].split("Possible values are:")[1].split("</p>")[0]
    return {
        "ec2_instance_types": sorted(ec2["InstanceType"]["enum"]),
        "eks_log_types": list(eks["LogType"]["enum"]),
        "log_retention_days": [int(n) for n in re.findall(r"\d+", retention)],
        "partitions": [
            {"partition": p["partition"], "dnsSuffix": p["dnsSuffix"], "regions": sorted(p["regions"])}
            for p in loader.load_data("endpoints")["partitions"]
        ],
    }


CACHE_GLOB = "botocore-facts-*.json"


class BotocoreFactsMissing(ValueError):
    """No botocore here and no facts cached by a machine that has it: one line saying what to do."""


def installed_version() -> str | None:
    """The installed botocore's version; None where it is not installed (no package metadata)."""
    try:
        return version("botocore")
    except PackageNotFoundError:
        return None


def cache_file(botocore_version: str | None = None) -> Path:
    """One file per botocore version, so an upgrade of botocore reads its own models again."""
    return environment.cache_dir() / CACHE_GLOB.replace("*", botocore_version or version("botocore"))


def _release(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.stem))


def carried_json() -> dict:
    """Without botocore: the facts of the newest botocore some machine with it cached here."""
    folder = environment.cache_dir()
    for path in sorted(folder.glob(CACHE_GLOB), key=_release, reverse=True):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    raise BotocoreFactsMissing(
        f"botocore is not installed and {folder} holds no {CACHE_GLOB}: pip install botocore, or copy that file "
        "from a machine with botocore (any `make plan` writes it; `make gpu-wheels` puts it in .whl/kit)"
    )


def _cached_json() -> dict:
    """botocore's facts, read once per botocore version and kept beside the other caches: a config
    mistake is then reported in well under a second."""
    installed = installed_version()
    if installed is None:
        return carried_json()
    path = cache_file(installed)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    facts = read_botocore()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(facts), encoding="utf-8")
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass  # a read-only home only costs the next run the same half second
    return facts


def as_facts(raw: dict) -> BotocoreFacts:
    return BotocoreFacts(
        ec2_instance_types=frozenset(raw["ec2_instance_types"]),
        eks_log_types=tuple(raw["eks_log_types"]),
        log_retention_days=tuple(raw["log_retention_days"]),
        partitions=tuple(Partition(p["partition"], p["dnsSuffix"], frozenset(p["regions"])) for p in raw["partitions"]),
    )


@cache
def load() -> BotocoreFacts:
    """The facts of the installed botocore (from the cache when it has them)."""
    return as_facts(_cached_json())
