"""The known-issues table (ray_llm_eks/domain/data/known_issues.yaml): each entry hits the stack shape it names and
stops hitting when one fact of its condition goes; the shipped stacks get exactly the lines intended."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ray_llm_eks.adapters.stack import load_settings, stack_file
from ray_llm_eks.domain.checks import known_issues
from ray_llm_eks.domain.checks.known_issues import StackFacts
from ray_llm_eks.domain.core.errors import ConfigError
from ray_llm_eks.domain.render import ray_service
from ray_llm_eks.domain.serving.fields import put
from ray_llm_eks.domain.serving.llm_config import LlmConfig
from tests.conftest import ROOT

DLC = {"ray": "2.58.0", "vllm": "0.26.0", "nixl": "1.3.1"}
# The shipped dev stack as the table sees it: PD, LIBFABRIC, NixlConnector, the hybrid Qwen3.5, TP 1/1.
DEV = StackFacts(
    pd=True,
    kv_backends=frozenset({"LIBFABRIC"}),
    kv_connectors=frozenset({"NixlConnector"}),
    hybrid=True,
    tp="equal",
)
DENSE = replace(DEV, hybrid=False)


def hit_ids(facts: StackFacts, versions=DLC) -> set[str]:
    return {h.entry.id for h in known_issues.evaluate(known_issues.entries(), facts, versions)}


def test_the_table_covers_the_five_bugs_with_a_decision_each():
    table = {e.id: e for e in known_issues.entries()}
    assert set(table) == {
        "nixl-fi-more-hang",
        "vllm-ssm-prefix-cache-assert",
        "vllm-hybrid-prefix-cache-ineffective",
        "nixl-stale-state-after-prefill-restart",
        "vllm-hetero-tp-replicated-kv",
        "vllm-hetero-tp-hybrid",
        "libfabric-same-node-eagain",
    }
    assert {e.decision for e in table.values()} <= {"refuse", "warn"}
    assert table["nixl-fi-more-hang"].fixed == "1.3.2"
    assert table["vllm-ssm-prefix-cache-assert"].fixed == "0.29.0"


# One case per entry: the facts that hit it, and for each fact of its condition the same facts without it.
CASES = {
    "nixl-fi-more-hang": (
        replace(DEV, kv_connectors=frozenset({"NixlPushConnector"})),
        {"pd": False, "kv_backends": frozenset({"UCX"}), "kv_connectors": frozenset({"NixlConnector"})},
    ),
    "vllm-ssm-prefix-cache-assert": (
        replace(DEV, prefix_caching_roles=("prefill", "decode")),
        {"pd": False, "hybrid": False, "prefix_caching_roles": ("prefill",)},
    ),
    "vllm-hybrid-prefix-cache-ineffective": (
        replace(DEV, pd=False, prefix_caching_roles=("collocated",)),
        {"hybrid": False, "prefix_caching_roles": ()},
    ),
    "nixl-stale-state-after-prefill-restart": (DEV, {"pd": False}),
    "vllm-hetero-tp-replicated-kv": (
        replace(DENSE, tp="prefill>decode", kv_heads_replicated=True),
        {"pd": False, "hybrid": True, "tp": "equal", "kv_heads_replicated": False},
    ),
    "vllm-hetero-tp-hybrid": (replace(DEV, tp="prefill<decode"), {"pd": False, "hybrid": False, "tp": "equal"}),
    "libfabric-same-node-eagain": (
        replace(DEV, shared_node=True),
        {"pd": False, "kv_backends": frozenset({"UCX"}), "shared_node": False},
    ),
}


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_each_entry_hits_its_condition_and_not_without_any_one_fact(entry_id):
    facts, without = CASES[entry_id]
    assert entry_id in hit_ids(facts)
    for fact, value in without.items():
        assert entry_id not in hit_ids(replace(facts, **{fact: value})), fact


def test_an_entry_stops_at_its_fixed_version_and_an_unknown_version_only_warns():
    facts = replace(DEV, prefix_caching_roles=("decode",))
    assert "vllm-ssm-prefix-cache-assert" not in hit_ids(facts, DLC | {"vllm": "0.29.0"})
    assert "vllm-ssm-prefix-cache-assert" in hit_ids(facts, DLC | {"vllm": "0.28.9"})
    own_image = known_issues.evaluate(known_issues.entries(), facts, {"ray": "2.58.0"})
    (hit,) = [h for h in own_image if h.entry.id == "vllm-ssm-prefix-cache-assert"]
    assert not hit.refused and "version unknown" in hit.line()


def test_a_hit_is_one_line_with_the_link_the_fix_and_the_way_out():
    (hit,) = [h for h in known_issues.evaluate(known_issues.entries(), DEV, DLC)]
    text = hit.line()
    assert "\n" not in text and "https://github.com/vllm-project/vllm/issues/49238" in text and "way out:" in text


def test_the_table_refuses_a_malformed_entry():
    good = {"id": "x", "bug": "b", "component": "nixl", "fixed": None, "links": ["https://x"], "when": {"pd": True}}
    good |= {"decision": "warn", "way_out": "w"}
    assert known_issues.parse([good])[0].id == "x"
    for field, bad in (("component", "torch"), ("decision", "maybe"), ("when", {"gpu": "L4"}), ("fixed", "1.3")):
        with pytest.raises(ConfigError, match=field):
            known_issues.parse([good | {field: bad}])


# ---------------------------------------------------------------- from the stacks themselves


def settings_of(stack: str, overrides: dict | None = None):
    return load_settings(stack_file(stack, ROOT, overrides=overrides))


def test_the_shipped_stacks_get_exactly_their_warnings():
    stale, ineffective = (
        "known issue nixl-stale-state-after-prefill-restart",
        "known issue vllm-hybrid-prefix-cache-ineffective",
    )
    expected = {
        "dev": [stale],
        "prod": [stale],
        "xpyd": [ineffective, stale],  # prefix caching on prefill (ray_llm_eks/serve_configs/pd-xpyd.yaml)
        "dp": [ineffective],  # prefix caching on its collocated replicas (ray_llm_eks/serve_configs/data-parallel.yaml)
        "baseline": [],
        "tp": [],
    }
    for stack, lines in expected.items():
        assert [line.split(" at ")[0] for line in known_issues.warnings(settings_of(stack))] == lines, stack


def test_prefix_caching_on_a_hybrid_pd_role_is_refused():
    settings = settings_of("dev")

    def caching(role: str, config: LlmConfig) -> LlmConfig:
        return put(config, engine_kwargs=put(config.engine, enable_prefix_caching=True)) if role == "decode" else config

    doc = settings.serving.serve_document.map_roles(caching)
    with pytest.raises(ConfigError, match="vllm-ssm-prefix-cache-assert"):
        known_issues.refuse(replace(settings, serving=replace(settings.serving, serve_document=doc)))


def test_the_rendered_pools_keep_prefill_and_decode_off_one_node():
    settings = settings_of("dev")
    spec = ray_service.ray_service_spec(settings)
    roles = {name: pool.app_role for name, pool in settings.gpu_pools.items()}
    assert not known_issues.shared_node(spec, roles)
    for group in spec["rayClusterConfig"]["workerGroupSpecs"]:
        group["template"]["spec"].pop("nodeSelector")
        break
    assert known_issues.shared_node(spec, roles)
