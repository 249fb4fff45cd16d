"""The router comparison's judging (rehearsal/routers.py) over text in the formats Ray 2.58, vLLM 0.26 and
AIPerf 0.13.0 write: Serve's replica access lines, Ray's Prometheus text, AIPerf's per-request records."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from llmclient.metrics import parse_text
from measure import bench, kv_proof
from ray_llm_eks.domain.serving import routing
from ray_llm_eks.domain.serving.serve_app import document_dict, parse_document
from rehearsal import routers
from rehearsal.checks import routing as routing_check
from rehearsal.substitute import LocalDocument, edit_roles
from tests.conftest import ROOT

# As Ray 2.58 writes them (seen in a dp rehearsal's serve/replica_llm_LLMServer_*.log).
LOG = """\
INFO 2026-12-01 14:41:47,906 llm_LLMServer:Qwen--Qwen3_5-9B euscoro1 req-a0 -- CALL chat OK 838.5ms
INFO 2026-12-01 14:41:48,001 llm_LLMServer:Qwen--Qwen3_5-9B euscoro1 req-a1 -- CALL chat OK 385.0ms
INFO 2026-12-01 14:41:49,001 llm_LLMServer:Qwen--Qwen3_5-9B oz3a0ro1 req-a2 -- CALL chat OK 385.0ms
INFO 2026-12-01 14:41:49,101 llm_LLMServer:Qwen--Qwen3_5-9B oz3a0ro1 req-b0 -- CALL chat OK 385.0ms
INFO 2026-12-01 14:41:49,201 llm_LLMServer:Qwen--Qwen3_5-9B oz3a0ro1 req-b1 -- CALL chat OK 385.0ms
INFO 2026-12-01 14:41:49,301 llm_OpenAiIngress 1nxk0hge req-b1 -- POST /v1/chat/completions 200 854.1ms
INFO 2026-12-01 14:41:49,401 llm_LLMServer:Qwen--Qwen3_5-9B oz3a0ro1 req-x -- CALL llm_config OK 1.0ms
WARNING 2026-12-01 15:26:02,114 llm_ApiKeyIngress 1nxk0hge req-c0 -- Failed to get queue length from Replica(id=\
'oz3a0ro1', deployment='LLMServer:Qwen--Qwen3_5-9B', app='llm') within 5.0s. If this ...
"""
NAMES = (routers.QUERIES, routers.HITS)
METRICS = """\
# HELP ray_vllm_prefix_cache_queries_total Prefix cache queries
# TYPE ray_vllm_prefix_cache_queries_total counter
ray_vllm_prefix_cache_queries_total{ReplicaId="euscoro1",engine="0",model_name="m"} 1000.0
ray_vllm_prefix_cache_queries_total{ReplicaId="oz3a0ro1",engine="0",model_name="m"} 500.0
ray_vllm_prefix_cache_hits_total{ReplicaId="euscoro1",engine="0",model_name="m"} 600.0
ray_vllm_prefix_cache_hits_total{ReplicaId="oz3a0ro1",engine="0",model_name="m"} 0.0
ray_vllm_prompt_tokens_total{ReplicaId="oz3a0ro1",engine="0",model_name="m"} 1500.0
"""


def record(conversation: str, turn: int, request: str, phase: str = "profiling", ttft: float = 100.0) -> dict:
    return {
        "metadata": {
            "conversation_id": conversation,
            "turn_index": turn,
            "x_request_id": request,
            "benchmark_phase": phase,
        },
        "metrics": {"time_to_first_token": {"value": ttft, "unit": "ms"}},
    }


def test_serve_access_lines_give_each_requests_replica():
    served = routers.served_by(LOG.splitlines(), "llm_LLMServer:Qwen--Qwen3_5-9B")
    assert served == {"req-a0": "euscoro1", "req-a1": "euscoro1", "req-a2": "oz3a0ro1", "req-b0": "oz3a0ro1",
                      "req-b1": "oz3a0ro1"}  # fmt: skip
    assert routers.served_by(LOG.splitlines(), "llm_Prefill:m") == {}
    assert routers.late_probes(LOG.splitlines()) == 1


def test_landing_counts_turns_on_their_previous_turns_replica():
    served = routers.served_by(LOG.splitlines(), "llm_LLMServer:Qwen--Qwen3_5-9B")
    records = [
        record("a", 0, "req-a0"),
        record("a", 1, "req-a1"),  # same replica as turn 0: landed
        record("a", 2, "req-a2"),  # moved: not landed
        record("b", 0, "req-b0"),
        record("b", 1, "req-b1"),  # landed
        record("c", 1, "req-c1"),  # no replica in the logs
        record("w", 1, "req-a1", phase="warmup"),  # warm-up: left out
    ]
    land = routers.landing(records, served)
    assert (land.landed, land.turns, land.unknown) == (2, 3, 1)
    assert land.share == pytest.approx(2 / 3)
    assert routers.landing([], served).share is None


def test_prefix_cache_hit_rate_is_the_change_over_the_phase():
    before = routers.prefix_cache_counts(parse_text(METRICS, NAMES))
    assert before == {"euscoro1": (1000.0, 600.0), "oz3a0ro1": (500.0, 0.0)}
    later = METRICS.replace("1000.0", "1400.0").replace("} 600.0", "} 900.0") + (
        'ray_vllm_prefix_cache_queries_total{ReplicaId="new1",engine="0",model_name="m"} 100.0\n'
        'ray_vllm_prefix_cache_hits_total{ReplicaId="new1",engine="0",model_name="m"} 50.0\n'
    )
    after = routers.prefix_cache_counts(parse_text(later, NAMES))
    # euscoro1: 300 of 400 more; new1 (started after the first snapshot): 50 of 100.
    assert routers.hit_rate(before, after, ["euscoro1", "oz3a0ro1", "new1"]) == (350.0, 500.0)


def test_the_table_shows_both_policies_side_by_side():
    point = bench.Point(4, 32, 0, 10.0, 3.2, 50.0, 3.2, 1.0, {"ttft_ms": {"p50": 120.0, "p95": 300.0, "p99": 400.0}})
    records = [record("a", 0, "r0", ttft=500.0), record("a", 1, "r1", ttft=100.0), record("a", 2, "r2", ttft=300.0)]
    first = routers.phase("powerOfTwo", (100.0, 400.0), routers.Landing(1, 2, 0), point, records)
    second = routers.phase("prefixAffinity", (300.0, 400.0), routers.Landing(2, 2, 0), point, records, 7)
    assert first.later_ttft_ms == {"p50": 100.0, "p95": 300.0}
    lines = routers.table([first, second])
    assert lines[0].split() == ["powerOfTwo", "prefixAffinity"]
    assert "25.0% of 400 tok" in lines[1] and "75.0% of 400 tok" in lines[1]
    assert "50.0% (1/2)" in lines[2] and "100.0% (2/2)" in lines[2]
    assert lines[-1].split()[-2:] == ["0", "7"]
    assert first.as_json()["prefix_cache_hit_rate"] == 0.25
    assert routers.verdict(first, second, 1) is None
    assert "did not raise" in routers.verdict(second, first, 1)
    assert "did not raise" in routers.verdict(first, first, 1)
    assert "never ran" in routers.verdict(first, second, 0)
    failed = routers.phase("prefixAffinity", (300.0, 400.0), routers.Landing(2, 2, 0), replace(point, errors=1), [])
    assert routers.verdict(first, failed, 1) == "router comparison: 1 requests failed"


def _local(stack: str) -> LocalDocument:
    from ray_llm_eks.adapters.stack import load_settings, stack_file

    document = document_dict(load_settings(stack_file(stack, ROOT)).serving.serve_document)
    return LocalDocument(document=document, substitutions=[], family="qwen3", hybrid=False, model_ids=["m"], pd=False)


def test_prepare_deploys_power_of_two_and_keeps_the_stacks_router_for_the_switch():
    local, args = _local("dp"), argparse.Namespace()
    lines = routing_check._prepare(local, args)
    (config,) = parse_document(local.document, "t").roles.values()
    assert "request_router_config" not in config.deployment
    assert args.compare_routers_role == "collocated"
    assert args.compare_routers_config["request_router_class"] == routing.PREFIX_AFFINITY_CLASS
    assert args.compare_routers_config["request_router_kwargs"] == {"imbalanced_threshold": 16}
    assert "power-of-two" in lines[0]
    env = local.document["applications"][0]["runtime_env"]["env_vars"]
    assert env["RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S"] == routing_check.PROBE_DEADLINE_HERE
    xpyd = _local("xpyd")
    routing_check._prepare(xpyd, argparse.Namespace())
    assert "request_router_config" not in parse_document(xpyd.document, "t").roles["prefill"].deployment


def test_prepare_refuses_a_stack_without_two_replicas_of_a_routed_role():
    with pytest.raises(ValueError, match="2 replicas or more"):
        routing_check._prepare(_local("dev"), argparse.Namespace())


def test_prefix_over_nixl_runs_only_where_pd_prefill_asks_for_a_prefix_cache():
    def runs(document: dict, pd: bool) -> bool:
        return routing_check._prefill_caches_prefixes(argparse.Namespace(document=document, pd=pd))

    document = _local("dev").document
    assert not runs(document, pd=True)  # dev's prefill leaves prefix caching to vLLM's default for its model

    def prefill_caches(role: str, config: dict) -> None:
        if role == "prefill":
            config["engine_kwargs"]["enable_prefix_caching"] = True

    edit_roles(document, "t", prefill_caches)
    assert runs(document, pd=True) and not runs(document, pd=False)
    assert not runs(_local("baseline").document, pd=False)  # collocated: no prefill role


def test_prefix_over_nixl_needs_a_hit_every_read_and_no_recompute():
    before = kv_proof.KvCounters(bytes_buckets={float("inf"): 10.0}, decode_tokens={"local_compute": 5.0})
    after = kv_proof.KvCounters(bytes_buckets={float("inf"): 13.0}, decode_tokens={"local_compute": 8.0})
    good = routers.prefix_over_nixl(before, after, (1056.0, 4200.0), 3)
    assert good.problem is None
    assert "hits 1056 of 4200 prompt tokens; 3 KV reads, 0 failed; decode computed 3" in good.line
    assert "no request found" in routers.prefix_over_nixl(before, after, (0.0, 4200.0), 3).problem
    short = kv_proof.KvCounters(bytes_buckets={float("inf"): 12.0}, decode_tokens={"local_compute": 7.0})
    assert "did not move" in routers.prefix_over_nixl(before, short, (1056.0, 4200.0), 3).problem
    failed = kv_proof.KvCounters(
        bytes_buckets={float("inf"): 13.0}, failed_transfers=1.0, decode_tokens={"local_compute": 8.0}
    )
    assert "did not move" in routers.prefix_over_nixl(before, failed, (1056.0, 4200.0), 3).problem
    recomputed = kv_proof.KvCounters(bytes_buckets={float("inf"): 13.0}, decode_tokens={"local_compute": 4205.0})
    assert "computed the prompt again" in routers.prefix_over_nixl(before, recomputed, (1056.0, 4200.0), 3).problem
