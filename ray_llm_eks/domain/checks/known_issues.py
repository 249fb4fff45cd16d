"""Known upstream bugs on the PD path (ray_llm_eks/domain/data/known_issues.yaml), evaluated against a stack.

    facts = stack_facts(settings, spec)        # what the table's conditions read, from the rendered stack
    hits = evaluate(entries(), facts, versions) # the entries whose condition holds at affected versions
    refuse(settings) / warnings(settings)       # what config.load_settings and __main__.py do with them

A hit whose component version the stack does not know (an image of the user's: rayVersion only) is
a warning whatever its decision: the stack may or may not run the affected version.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.domain.core.errors import ConfigError, yaml_text
from ray_llm_eks.domain.core.facts import POOL_NODE_LABEL
from ray_llm_eks.domain.serving import model_table
from ray_llm_eks.domain.serving.fields import given
from ray_llm_eks.domain.serving.llm_config import KvTransferConfig
from ray_llm_eks.domain.serving.serve_app import ServeDocument

TABLE = packaged.DATA / "known_issues.yaml"
DECISIONS = ("refuse", "warn")
COMPONENTS = ("nixl", "vllm", "ray")
TP_SHAPES = ("prefill>decode", "prefill<decode", "equal")
ROLES = ("prefill", "decode", "collocated")


@dataclass(frozen=True)
class Entry:
    id: str
    bug: str
    component: str
    fixed: str | None
    links: tuple[str, ...]
    when: Mapping[str, Any]
    decision: str
    way_out: str
    mitigated_by: str | None = None

    def affects(self, version: str | None) -> bool | None:
        """Whether `version` of the component has the bug; None when the version is unknown."""
        if version is None:
            return None
        return self.fixed is None or _version(version) < _version(self.fixed)


@dataclass(frozen=True)
class Hit:
    entry: Entry
    version: str | None  # the component's version in the stack's image; None: unknown

    @property
    def refused(self) -> bool:
        return self.entry.decision == "refuse" and self.version is not None

    def line(self) -> str:
        """The one line: the bug, where it is tracked, the fix and the way out."""
        e = self.entry
        at = f"{e.component} {self.version}" if self.version else f"{e.component} (version unknown: your image)"
        fixed = f"fixed in {e.component} {e.fixed}" if e.fixed else "not fixed upstream yet"
        return f"known issue {e.id} at {at}: {e.bug} ({e.links[0]}; {fixed}); way out: {e.way_out}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text)[:3])


# ---------------------------------------------------------------- the table


def _shape_checks() -> dict[str, Callable[[Any], bool]]:
    """Each condition fact and the values the table may give it."""
    return {
        "pd": lambda v: v is True,
        "kv_backend": lambda v: isinstance(v, str),
        "kv_connector": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "hybrid": lambda v: isinstance(v, bool),
        "prefix_caching": lambda v: isinstance(v, list) and bool(v) and set(v) <= set(ROLES),
        "tp": lambda v: isinstance(v, list) and bool(v) and set(v) <= set(TP_SHAPES),
        "kv_heads_replicated": lambda v: isinstance(v, bool),
        "shared_node": lambda v: v is True,
    }


def parse(raw: Any, where: str = "ray_llm_eks/domain/data/known_issues.yaml") -> tuple[Entry, ...]:
    """The table, checked: a wrong entry is one ConfigError naming it."""
    if not isinstance(raw, list):
        raise ConfigError("known issues", raw, "a list of entries", file=where)
    checks = _shape_checks()
    found = []
    for n, item in enumerate(raw):
        key = f"[{n}]"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise ConfigError(key, item, "an entry with an id", file=where)
        key = f"[{n}] {item['id']}"
        if item.get("component") not in COMPONENTS:
            raise ConfigError(f"{key}.component", item.get("component"), f"one of {yaml_text(COMPONENTS)}", file=where)
        if item.get("decision") not in DECISIONS:
            raise ConfigError(f"{key}.decision", item.get("decision"), f"one of {yaml_text(DECISIONS)}", file=where)
        fixed = item.get("fixed")
        if fixed is not None and not re.fullmatch(r"\d+\.\d+\.\d+", str(fixed)):
            raise ConfigError(f"{key}.fixed", fixed, "an exact version such as 1.3.2, or null", file=where)
        when = item.get("when")
        if not isinstance(when, dict) or not when:
            raise ConfigError(f"{key}.when", when, "a mapping of condition facts", file=where)
        for fact, value in when.items():
            if fact not in checks or not checks[fact](value):
                raise ConfigError(f"{key}.when.{fact}", value, f"a fact of {yaml_text(sorted(checks))}", file=where)
        links = item.get("links")
        if not isinstance(links, list) or not links or not all(str(x).startswith("https://") for x in links):
            raise ConfigError(f"{key}.links", links, "a list of https:// links, the issue first", file=where)
        for text_field in ("bug", "way_out"):
            if not isinstance(item.get(text_field), str):
                raise ConfigError(f"{key}.{text_field}", item.get(text_field), "a line of text", file=where)
        found.append(
            Entry(
                id=item["id"],
                bug=item["bug"],
                component=item["component"],
                fixed=None if fixed is None else str(fixed),
                links=tuple(links),
                when=dict(when),
                decision=item["decision"],
                way_out=item["way_out"],
                mitigated_by=item.get("mitigated_by"),
            )
        )
    return tuple(found)


@cache
def entries() -> tuple[Entry, ...]:
    return parse(packaged.load_yaml(TABLE))


# ---------------------------------------------------------------- what the conditions read


@dataclass(frozen=True)
class StackFacts:
    """The stack as the table's conditions see it (the KV, TP and placement facts of a PD application only)."""

    pd: bool
    kv_backends: frozenset[str] = frozenset()
    kv_connectors: frozenset[str] = frozenset()
    hybrid: bool = False
    prefix_caching_roles: tuple[str, ...] = ()
    tp: str | None = None  # one of TP_SHAPES
    kv_heads_replicated: bool = False
    shared_node: bool = False


def _tp_shape(prefill: int, decode: int) -> str:
    return "equal" if prefill == decode else ("prefill>decode" if prefill > decode else "prefill<decode")


def shared_node(spec: Mapping, pool_roles: Mapping[str, str]) -> bool:
    """Whether a prefill and a decode worker pod may land on one node: a worker group of either role that
    selects no pool's nodes, or a prefill and a decode group selecting the same ones. `pool_roles`: worker
    group (pool) name -> the role it runs."""
    selectors: dict[str, list] = {"prefill": [], "decode": []}
    for group in spec.get("rayClusterConfig", {}).get("workerGroupSpecs", []):
        role = pool_roles.get(group.get("groupName"))
        if role in selectors:
            selector = ((group.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
            selectors[role].append(selector.get(POOL_NODE_LABEL))
    chosen = selectors["prefill"] + selectors["decode"]
    return None in chosen or bool(set(selectors["prefill"]) & set(selectors["decode"]))


def facts_of(document: ServeDocument, model_spec, spec: Mapping, pool_roles: Mapping[str, str]) -> StackFacts:
    """The facts of a rendered serve document (`model_spec`: the stack's modelSpec or None) and its RayService
    spec."""
    configs = document.roles
    first = next(iter(configs.values()))
    model = model_table.model_spec(*first.model.id_and_source, model_spec)
    from ray_llm_eks.domain.serving.routing import (
        prefix_cache_on,  # here: routing's own imports reach config-time modules
    )

    caching = tuple(r for r, c in configs.items() if prefix_cache_on(c, model.hybrid))
    if not {"prefill", "decode"} <= set(configs):
        return StackFacts(pd=False, hybrid=model.hybrid, prefix_caching_roles=caching)
    backends, connectors = set(), set()
    for config in (configs["prefill"], configs["decode"]):
        transfer = config.engine.kv_transfer_config or KvTransferConfig()
        connectors.add(given(transfer.kv_connector, ""))
        backends |= set(transfer.nixl_backends)
    tp = {role: config.engine.tensor_parallel for role, config in configs.items()}
    return StackFacts(
        pd=True,
        kv_backends=frozenset(backends),
        kv_connectors=frozenset(connectors),
        hybrid=model.hybrid,
        prefix_caching_roles=caching,
        tp=_tp_shape(tp["prefill"], tp["decode"]),
        kv_heads_replicated=tp["prefill"] > model.kv_heads,
        shared_node=shared_node(spec, pool_roles),
    )


def holds(when: Mapping[str, Any], facts: StackFacts) -> bool:
    """Whether every fact of an entry's condition holds for the stack."""
    tests = {
        "pd": lambda v: facts.pd,
        "kv_backend": lambda v: v in facts.kv_backends,
        "kv_connector": lambda v: bool(set(v) & facts.kv_connectors),
        "hybrid": lambda v: facts.hybrid == v,
        "prefix_caching": lambda v: bool(set(v) & set(facts.prefix_caching_roles)),
        "tp": lambda v: facts.tp in v,
        "kv_heads_replicated": lambda v: facts.kv_heads_replicated == v,
        "shared_node": lambda v: facts.shared_node,
    }
    return all(tests[fact](value) for fact, value in when.items())


def evaluate(table: tuple[Entry, ...], facts: StackFacts, versions: Mapping[str, str]) -> list[Hit]:
    """The entries the stack hits at the versions its image holds (`versions`: component -> version)."""
    hits = []
    for entry in table:
        version = versions.get(entry.component)
        if entry.affects(version) is not False and holds(entry.when, facts):
            hits.append(Hit(entry, version))
    return hits


def hits_of(settings) -> list[Hit]:
    """What the stack hits, from its Settings (the rendered serve config and RayService spec)."""
    from ray_llm_eks.domain.render.ray_service import (
        ray_service_spec,  # here: ray_service needs the Settings this module checks
    )

    spec = ray_service_spec(settings)
    roles = {name: pool.app_role for name, pool in settings.gpu_pools.items()}
    facts = facts_of(settings.serving.serve_document, settings.serving.model_spec, spec, roles)
    return evaluate(entries(), facts, settings.serving.versions)


def refuse(settings) -> None:
    """The first refused hit as one ConfigError (the serve config is what the user changes)."""
    for hit in hits_of(settings):
        if hit.refused:
            raise ConfigError("serveConfig", settings.serving.serve_config, hit.line())


def warnings(settings) -> list[str]:
    """One line per hit that is only warned (refused hits never get this far)."""
    return [hit.line() for hit in hits_of(settings) if not hit.refused]
