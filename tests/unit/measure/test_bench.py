"""`make bench` / `make compare`, the pure half (measure/bench.py): the load generator's configuration per load
point, AIPerf 0.13.0's summary read into our figures, goodput at the SLO, the breaking load, $/Mtok."""

from __future__ import annotations

import json

import pytest

from measure import bench, kv_proof
from measure.kv_proof import Sample
from ray_llm_eks.domain.core.errors import ConfigError
from tests.conftest import ROOT

SUMMARY = ROOT / "tests" / "data" / "aiperf-0.13.0-summary.json"
TARGET = bench.Target("http://127.0.0.1:8000/", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-9B")
FIXED = bench.Workload()


def config(workload=FIXED, kind="concurrency", load=4, warmup=True, target=TARGET) -> dict:
    return bench.aiperf_config(target, workload, kind, load, bench.Bounds(), 2000, 100, 7, "out", warmup)


def test_a_sweep_has_at_least_four_increasing_points():
    assert bench.parse_sweep("concurrency:1,2,4,8") == bench.Sweep("concurrency", (1, 2, 4, 8))
    assert bench.parse_sweep("rate:0.5,1,2,4").points == (0.5, 1.0, 2.0, 4.0)
    for bad, rule in {
        "concurrency:1,2,4": "at least 4",
        "concurrency:1,4,2,8": "increasing",
        "concurrency:1,1,2,4": "distinct",
        "concurrency:1,2,4,8.5": "whole numbers",
        "qps:1,2,3,4": "KIND",
        "rate:0,1,2,3": "above 0",
        "rate:a,b,c,d": "numbers",
    }.items():
        with pytest.raises(ConfigError, match=rule):
            bench.parse_sweep(bad)


def test_the_key_is_only_a_reference_and_the_slo_is_the_stacks():
    doc = config()
    endpoint = doc["benchmark"]["endpoint"]
    assert endpoint["apiKey"] == "${OPENAI_API_KEY}"
    assert endpoint["url"] == "http://127.0.0.1:8000" and endpoint["streaming"] is True
    assert doc["benchmark"]["slos"] == {"time_to_first_token": 2000, "inter_token_latency": 100}
    assert doc["randomSeed"] == 7
    no_key = config(target=bench.Target("http://x", "m", "m", api_key=False))
    assert "apiKey" not in no_key["benchmark"]["endpoint"]


def test_each_point_is_bounded_and_only_the_first_warms_up():
    phases = config()["benchmark"]["phases"]
    assert [p["name"] for p in phases] == ["warmup", "profiling"]
    assert phases[0]["excludeFromResults"] is True and phases[0]["concurrency"] == 4
    profiling = phases[1]
    assert profiling == {
        "name": "profiling",
        "requests": 64,
        "duration": 120.0,
        "gracePeriod": 60.0,
        "type": "concurrency",
        "concurrency": 4,
    }
    assert [p["name"] for p in config(warmup=False)["benchmark"]["phases"]] == ["profiling"]
    rate = config(kind="rate", load=2.5)["benchmark"]["phases"][1]
    assert rate["type"] == "poisson" and rate["rate"] == 2.5 and "concurrency" not in rate
    assert bench.Bounds().worst_case_seconds(4) == 4 * 180


def test_workloads():
    fixed = config()["benchmark"]
    assert fixed["dataset"]["prompts"] == {"isl": {"mean": 512, "stddev": 0}, "osl": {"mean": 128, "stddev": 0}}
    assert fixed["endpoint"]["extra"] == {"ignore_eos": True}
    chat = config(bench.Workload("multiturn", isl=64, osl=32, turns=5, context_tokens=900, system_tokens=100))
    dataset = chat["benchmark"]["dataset"]
    assert dataset["turns"] == {"mean": 5, "stddev": 0}
    assert dataset["prefixPrompts"] == {"userContextLength": 900, "sharedSystemLength": 100}
    assert "extra" not in chat["benchmark"]["endpoint"]
    own = config(bench.Workload("dataset", dataset="/data/chats.jsonl", dataset_format="multi_turn"))
    assert own["benchmark"]["dataset"] == {
        "type": "file",
        "path": "/data/chats.jsonl",
        "format": "multi_turn",
        "osl": 128,
    }


@pytest.mark.parametrize(
    ("workload", "rule"),
    [
        (bench.Workload("replay"), "one of"),
        (bench.Workload("dataset"), "a JSONL file"),
        (bench.Workload("dataset", dataset="x.jsonl", dataset_format="trace"), "one of"),
        (bench.Workload("fixed", dataset="x.jsonl"), "only with --workload dataset"),
        (bench.Workload("fixed", osl=0), "1 or more"),
        (bench.Workload("multiturn", context_tokens=-1), "0 or more"),
    ],
)
def test_bad_workloads_are_one_line(workload, rule):
    with pytest.raises(ConfigError, match=rule):
        bench.check_workload(workload)


def test_aiperfs_summary_becomes_our_point():
    point = bench.read_point(json.loads(SUMMARY.read_text()), 8)
    assert point.requests == 12 and point.errors == 0
    assert point.latencies["ttft_ms"]["p95"] == pytest.approx(1050, abs=1)
    assert point.latencies["e2e_ms"]["p50"] == pytest.approx(955.98, abs=0.01)
    assert set(point.latencies) == {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}
    assert all(set(v) == {"p50", "p95", "p99"} and None not in v.values() for v in point.latencies.values())
    assert point.goodput == pytest.approx(point.request_rate) and point.good_fraction == 1.0
    assert point.meets_slo


def test_errors_are_counted_from_the_error_summary():
    export = dict(json.loads(SUMMARY.read_text()), error_summary=[{"error_details": {"code": 503}, "count": 3}])
    point = bench.read_point(export, 8)
    assert point.errors == 3 and not point.meets_slo


def _point(load, goodput, good, tokens=100.0):
    return bench.Point(load, 10, 0, 10.0, goodput, tokens, goodput, good, {}, bench.usd_per_million_tokens(3.6, tokens))


def _run(points, label="a") -> bench.Run:
    return bench.Run(
        label, "u", "m", bench.Sweep("concurrency", (1, 2, 4, 8)), bench.Workload(), 2000, 100, "defaults",
        3.6, "test", None, 1, points,
    )  # fmt: skip


def test_verdict_goodput_breaking_load_and_cost():
    run = _run([_point(1, 1.0, 1.0), _point(2, 1.9, 0.95), _point(4, 2.5, 0.7), _point(8, 2.0, 0.4)])
    verdict = run.verdict()
    assert verdict["best_goodput"] == 2.5 and verdict["best_goodput_load"] == 4
    assert verdict["highest_load_meeting_slo"] == 2 and verdict["breaks_slo_at"] == 4
    # 3.6 $/h at 100 output tokens/s: 360,000 tokens an hour, 10 $ per million.
    assert verdict["usd_per_million_output_tokens_at_slo"] == pytest.approx(10.0)
    assert _run([_point(1, 1.0, 1.0)] * 4).verdict()["breaks_slo_at"] is None
    assert _run([_point(1, 0.1, 0.1)] * 4).verdict()["highest_load_meeting_slo"] is None
    assert bench.usd_per_million_tokens(None, 100) is None and bench.usd_per_million_tokens(1.0, 0) is None


def test_a_run_survives_its_json_and_the_tables_name_both_runs():
    run = _run([_point(1, 1.0, 1.0), _point(2, 1.9, 0.95), _point(4, 2.5, 0.7), _point(8, 2.0, 0.4)])
    again = bench.run_from_json(json.loads(json.dumps(run.to_json())))
    assert again.verdict() == run.verdict() and again.points == run.points and again.sweep == run.sweep
    other = _run([*run.points[:2], _point(4, 3.0, 0.92), _point(8, 3.2, 0.91)], label="b")
    table = bench.text_table(bench.verdict_rows([run, other]))
    assert "breaks the SLO at" in table and "4 (requests in flight)" in table and "not within the sweep" in table
    assert bench.text_table(bench.point_rows(run)).count("\n") == 4


def test_kv_figures_per_transfer():
    figures = bench.KvFigures(transfers=4, megabytes=8.0, seconds=0.2).per_transfer()
    assert figures == {"transfers": 4, "mb_per_transfer": 2.0, "ms_per_transfer": 50.0, "gb_per_s": 0.04}
    assert bench.KvFigures(0, 0, 0).per_transfer()["mb_per_transfer"] is None


def test_kv_figures_come_from_the_counters_make_verify_reads():
    # The engines' samples as llmclient/metrics.py returns them: decode records the reads (two transfers,
    # 3 MB and 0.1 s in all); prefill's own series and Serve's gauge join the roles, as kv_proof does.
    samples = [
        Sample("ray_serve_replica_processing_queries", {"WorkerId": "d", "deployment": "Decode:m"}, 0),
        Sample("ray_vllm_nixl_bytes_transferred_bucket", {"WorkerId": "d", "le": "2097152.0"}, 2),
        Sample("ray_vllm_nixl_bytes_transferred_bucket", {"WorkerId": "d", "le": "+Inf"}, 2),
        Sample("ray_vllm_nixl_bytes_transferred_sum", {"WorkerId": "d"}, 3e6),
        Sample("ray_vllm_nixl_xfer_time_seconds_sum", {"WorkerId": "d"}, 0.1),
    ]
    figures = bench.KvFigures.of(kv_proof.counters(samples))
    assert figures == bench.KvFigures(transfers=2, megabytes=3.0, seconds=0.1)
    assert figures.per_transfer()["ms_per_transfer"] == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("loading", "tokenizer"),
    [
        ({"model_id": "acme-llama", "model_source": "Qwen/Qwen3.5-9B"}, "Qwen/Qwen3.5-9B"),  # own name
        ({"model_id": "Qwen/Qwen3.5-9B", "model_source": "s3://acme-models/qwen/"}, "Qwen/Qwen3.5-9B"),
        ({"model_id": "acme-llama", "model_source": "s3://acme-models/qwen/"}, None),  # --tokenizer it is
        ({"model_id": "Qwen/Qwen3.5-9B"}, "Qwen/Qwen3.5-9B"),
    ],
)
def test_a_stacks_tokenizer_is_its_hugging_face_source_or_id(loading, tokenizer):
    assert bench.stack_tokenizer(loading.get("model_source", loading["model_id"]), loading["model_id"]) == tokenizer
