"""The KV-path verdict from the engines' counters (measure/kv_proof.py), on readings shaped as Ray 2.58 exports
vLLM 0.26's NIXL histograms: cumulative buckets, bucket-midpoint sums."""

from __future__ import annotations

import dataclasses

import pytest

from measure import kv_proof
from measure.kv_proof import INF, KvCounters, KvShape, Sample
from ray_llm_eks.domain.serving import model_table
from ray_llm_eks.domain.serving.llm_config import EngineKwargs

# vLLM 0.26 nixl/stats.py: bytes-per-transfer buckets 2^11, 2^13, ... 2^33; transfer-time buckets.
BYTE_BOUNDS = [2.0 ** (10 + i) for i in range(1, 25, 2)]
TIME_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
# The rehearsal's stand-in (rehearsal/tiny_model.py qwen3_next): one attention layer of 2 KV heads x 64 in
# bf16 (512 B a token), three Gated DeltaNet layers (3072 B conv + 65536 B fp32 SSM each), CPU block 256.
TINY = KvShape(kv_bytes_per_token=512, state_bytes_per_sequence=3 * (3072 + 65536), block_size=256, hybrid=True)


def histogram(values: list[float], bounds: list[float]) -> dict[float, float]:
    return {le: float(sum(v <= le for v in values)) for le in [*bounds, INF]}


def reading(sizes=(), seconds=(), failed=0.0, local=0.0, received=0.0, decode=1) -> KvCounters:
    return KvCounters(
        bytes_buckets=histogram(list(sizes), BYTE_BOUNDS),
        seconds_buckets=histogram(list(seconds), TIME_BOUNDS),
        bytes_sum=float(sum(sizes)),
        seconds_sum=float(sum(seconds)),
        failed_transfers=failed,
        decode_tokens={"local_compute": local, "external_kv_transfer": received},
        engines={"prefill": 1, "decode": decode},
    )


# Measured in the dev rehearsal (docs/measurements.md, the stand-in's KV per request): prompts of 104, 925
# and 3128 tokens moved transfers Ray counted in (128 KiB, 512 KiB], (512 KiB, 2 MiB] and (512 KiB, 2 MiB].
PROMPTS = [104, 925, 3128]
SIZES = [TINY.expected_bytes(p) for p in PROMPTS]


def test_the_stand_ins_transfers_land_in_the_buckets_measured():
    assert [kv_proof.bucket_of(s, BYTE_BOUNDS) for s in SIZES] == [
        (2.0**17, 2.0**19),
        (2.0**19, 2.0**21),
        (2.0**19, 2.0**21),
    ]


def test_a_healthy_kv_path_passes_and_says_what_it_measured():
    before = reading(sizes=[300_000], seconds=[0.007], local=1, received=50)
    after = reading(
        sizes=[300_000, *SIZES], seconds=[0.007, 0.008, 0.02, 0.02], local=4, received=50 + sum(PROMPTS) - 3
    )
    v = kv_proof.judge(before, after, PROMPTS, TINY, 1e6, ["UCX"], {"UCX"})
    assert v.ok, v.failures
    text = "\n".join(v.lines)
    assert "1 expected in (128 KiB, 512 KiB]; 2 expected in (512 KiB, 2 MiB], measured: 1 in (128 KiB, 512 KiB]" in text
    assert "decode prompt tokens: 4154 received as KV, 3 computed" in text
    assert "NIXL backend: UCX (engine logs; the stack asks UCX)" in text


def test_a_failed_read_on_a_hybrid_model_is_caught_although_decode_reports_the_prompt_received():
    # vLLM 0.26 nixl/base_worker.py _handle_failed_transfer: no invalid block on a hybrid model, so the
    # scheduler counts the prompt as received; no byte moved and the failure counter counts.
    before = reading(sizes=[300_000], seconds=[0.007], local=1, received=50)
    after = reading(sizes=[300_000], seconds=[0.007], failed=3, local=4, received=50 + sum(PROMPTS) - 3)
    v = kv_proof.judge(before, after, PROMPTS, TINY, None, ["UCX"], None)
    assert (
        v.failures[0]
        == "KV did not move for every request: 0 NIXL transfer(s) for 3 long-prompt request(s), 3 expected"
    )
    assert "3 failed NIXL transfer(s) during the requests" in v.failures


def test_a_prompt_recomputed_on_decode_fails():
    before = reading(local=0)
    after = reading(local=sum(PROMPTS))
    v = kv_proof.judge(before, after, PROMPTS, TINY, None, [], None)
    assert any(f.startswith("decode recomputed 4157 prompt tokens of 3 request(s)") for f in v.failures)


def test_transfers_of_the_wrong_size_fail():
    v = kv_proof.judge(reading(), reading(sizes=[10_000] * 3, seconds=[0.001] * 3), PROMPTS, TINY, None, [], None)
    assert v.failures[0].startswith("KV transfers of another size than expected: 3 in (8 KiB, 32 KiB] measured")


def test_a_link_slower_than_the_floor_fails_only_when_even_the_bucket_edges_say_so():
    after = reading(sizes=SIZES, seconds=[0.3, 0.6, 0.6])  # (0.2, 0.3] and (0.5, 0.75] s: under 10 MB/s
    v = kv_proof.judge(reading(), after, PROMPTS, TINY, 1e9, [], None)
    assert any(f.startswith("KV moved at") and "below the floor 1 GB/s" in f for f in v.failures)
    assert kv_proof.judge(reading(), after, PROMPTS, TINY, 1e6, [], None).ok


def test_the_backend_in_the_logs_must_be_the_stacks():
    v = kv_proof.judge(reading(), reading(sizes=SIZES, seconds=[0.01] * 3), PROMPTS, TINY, None, ["LIBFABRIC"], {"UCX"})
    assert v.failures == ["NIXL backend in the engine logs is UCX, the stack asks LIBFABRIC"]


def test_no_decode_engine_is_said_plainly():
    v = kv_proof.judge(reading(), reading(decode=0), PROMPTS, TINY, None, [], None)
    assert v.failures == ["no decode engine in the metrics (no Serve replica whose deployment names decode)"]


def test_counters_join_engines_to_roles_through_serves_replica_gauge():
    samples = [
        Sample("ray_serve_replica_processing_queries", {"WorkerId": "p", "deployment": "Prefill:m"}, 0),
        Sample("ray_serve_replica_processing_queries", {"WorkerId": "d", "deployment": "Decode:m"}, 0),
        Sample("ray_serve_replica_processing_queries", {"WorkerId": "i", "deployment": "OpenAiIngress"}, 0),
        Sample("ray_vllm_prompt_tokens_by_source_total", {"WorkerId": "p", "source": "local_compute"}, 100),
        Sample("ray_vllm_prompt_tokens_by_source_total", {"WorkerId": "d", "source": "local_compute"}, 1),
        Sample("ray_vllm_nixl_bytes_transferred_bucket", {"WorkerId": "d", "le": "131072.0"}, 0),
        Sample("ray_vllm_nixl_bytes_transferred_bucket", {"WorkerId": "d", "le": "+Inf"}, 2),
    ]
    c = kv_proof.counters(samples)
    assert c.engines == {"prefill": 1, "decode": 1}
    assert c.decode_tokens == {"local_compute": 1}
    assert c.transfers == 2 and c.bytes_buckets[131072.0] == 0


def test_the_shape_of_the_served_model_comes_from_the_fits_layout():
    qwen = kv_proof.shape_of(model_table.KNOWN_MODELS["Qwen/Qwen3.5-9B"], EngineKwargs.of(max_model_len=4096))
    # 8 attention layers x 4 KV heads x 256 x 2 (K, V) x 2 B; 24 DeltaNet layers of state; the 528-token block.
    assert (qwen.kv_bytes_per_token, qwen.block_size, qwen.hybrid) == (32768, 528, True)
    assert qwen.state_bytes_per_sequence == pytest.approx(49.1 * 2**20, rel=0.01)
    llama = kv_proof.shape_of(
        model_table.KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"], EngineKwargs.of(max_model_len=4096)
    )
    assert (llama.kv_bytes_per_token, llama.block_size, llama.state_bytes_per_sequence) == (131072, 16, 0)
    assert llama.tokens_read(1000) == 1000 and qwen.tokens_read(1000) == 999


def test_other_traffic_between_the_readings_does_not_hide_or_fail_the_proof():
    # Someone else's short request moved a 20 KiB transfer meanwhile (and decode computed its last token);
    # ours are all there.
    after = reading(sizes=[*SIZES, 20_000], seconds=[0.01] * 4, local=4, received=sum(PROMPTS) - 3 + 40)
    assert kv_proof.judge(reading(), after, PROMPTS, TINY, None, [], None).ok
    # ...but not two tokens for it.
    after = reading(sizes=[*SIZES, 20_000], seconds=[0.01] * 4, local=5, received=sum(PROMPTS) - 3 + 40)
    assert not kv_proof.judge(reading(), after, PROMPTS, TINY, None, [], None).ok
    short = reading(sizes=[SIZES[0], 20_000, 20_000], seconds=[0.01] * 3, local=3, received=sum(PROMPTS) - 3)
    assert not kv_proof.judge(reading(), short, PROMPTS, TINY, None, [], None).ok


# ---------------------------------------------------------------- selective PD: short prompts on decode alone


def selective(base: KvCounters, local=0.0, split=0.0, prefill=0.0) -> KvCounters:
    return dataclasses.replace(base, paths={"local": local, "split": split}, requests={"prefill": prefill})


SHORT = [25, 25, 25]  # the rehearsal's one-word chat prompt on the stand-in's tokenizer


def test_counters_read_serves_requests_per_role_and_selective_pds_paths():
    samples = [
        Sample("ray_serve_deployment_request_counter_total", {"deployment": "Prefill:m", "replica": "a"}, 4),
        Sample("ray_serve_deployment_request_counter_total", {"deployment": "Decode:m", "replica": "b"}, 7),
        Sample("ray_serve_deployment_request_counter_total", {"deployment": "ApiKeyIngress", "replica": "c"}, 7),
        Sample("ray_selective_pd_requests_total", {"deployment": "Decode:m", "path": "local"}, 3),
        Sample("ray_selective_pd_requests_total", {"deployment": "Decode:m", "path": "split"}, 4),
    ]
    c = kv_proof.counters(samples)
    assert c.requests == {"prefill": 4, "decode": 7}
    assert c.paths == {"local": 3, "split": 4}


def test_short_prompts_served_by_decode_alone_pass_and_say_what_was_measured():
    before = selective(reading(sizes=SIZES, local=3, received=4000), local=1, split=4, prefill=4)
    after = selective(reading(sizes=SIZES, local=3 + 75, received=4000), local=4, split=4, prefill=4)
    v = kv_proof.judge_local(before, after, SHORT, 28)
    assert v.ok, v.failures
    assert v.lines == [
        "short prompts of 25, 25, 25 tokens (selectivePd 28): decode counted local +3, split +0; prefill requests "
        "+0; NIXL transfers +0; decode prompt tokens 75 prefilled there, 0 received as KV"
    ]


@pytest.mark.parametrize(
    "after, failure",
    [
        # The subclass did not take the local path: Ray's PD orchestration sent them through prefill.
        (
            selective(reading(sizes=[*SIZES, *SIZES], local=6, received=4075), local=1, split=7, prefill=7),
            "selective PD counted 0 of 3 short prompt(s) on the local path",
        ),
        # Counted local, yet prefill served them and KV moved (the local branch still calling prefill).
        (
            selective(reading(sizes=[*SIZES, *SIZES], local=6, received=4075), local=4, split=4, prefill=7),
            "prefill handled 3 request(s) during 3 short prompt(s) (0 split)",
        ),
        (
            selective(reading(sizes=[*SIZES, *SIZES], local=78, received=4000), local=4, split=4, prefill=4),
            "3 NIXL transfer(s) during 3 short prompt(s) (0 split): KV moved for a prompt decode should prefill",
        ),
        (
            selective(reading(sizes=SIZES, local=3, received=4000), local=4, split=4, prefill=4),
            "decode prefilled 0 prompt tokens of 75 short-prompt ones",
        ),
    ],
)
def test_a_short_prompt_that_went_through_prefill_fails(after, failure):
    before = selective(reading(sizes=SIZES, local=3, received=4000), local=1, split=4, prefill=4)
    v = kv_proof.judge_local(before, after, SHORT, 28)
    assert failure in v.failures[0], v.failures


def test_a_short_prompt_not_below_the_threshold_proves_nothing():
    same = selective(reading(), local=0)
    v = kv_proof.judge_local(same, same, [25, 30], 28)
    assert v.failures == ["a short prompt of 30 tokens is not below selectivePd 28: nothing to prove"]


def test_other_split_traffic_during_the_short_prompts_is_allowed_for():
    before = selective(reading(sizes=SIZES, local=3, received=4000), local=1, split=4, prefill=4)
    # One other request took the split path meanwhile: its transfer and its prefill request are its own.
    after = selective(reading(sizes=[*SIZES, SIZES[0]], local=79, received=4103), local=4, split=5, prefill=5)
    assert kv_proof.judge_local(before, after, SHORT, 28).ok


def test_long_prompts_must_be_counted_on_the_split_path():
    v = kv_proof.Verdict()
    kv_proof.judge_split_path(v, selective(reading(), split=1), selective(reading(), split=4), 3)
    assert v.ok and v.lines == ["selective PD: decode counted split +3, local +0 for 3 long prompt(s)"]
    kv_proof.judge_split_path(v, selective(reading(), split=1), selective(reading(), split=3, local=1), 3)
    assert v.failures == ["selective PD counted 2 of 3 long prompt(s) on the split path"]


def test_the_path_labels_are_the_ones_the_decode_replicas_count():
    from ray_llm_eks.serve_ingress import local_prefill

    assert (kv_proof.LOCAL_PATH, kv_proof.SPLIT_PATH) == (local_prefill.LOCAL, local_prefill.SPLIT)
