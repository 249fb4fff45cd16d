"""Where a PD request's time goes (measure/pd_hops.py): the engines' histogram means between two readings, in both
namings (plain `vllm serve`, Ray's), and the proxy's hop percentiles."""

from __future__ import annotations

from measure import pd_hops
from measure.kv_proof import Sample


def hist(name: str, total: float, count: float, ray: bool = False) -> list[Sample]:
    base = pd_hops.ray_name(name) if ray else name
    return [Sample(f"{base}_sum", {}, total), Sample(f"{base}_count", {}, count)]


def test_the_means_are_of_the_events_between_the_readings_per_role_in_either_naming():
    before = {"decode": hist("vllm:nixl_xfer_time_seconds", 1.0, 10) + hist("vllm:nixl_bytes_transferred", 5e8, 10)}
    after = {
        "decode": hist("vllm:nixl_xfer_time_seconds", 3.0, 14) + hist("vllm:nixl_bytes_transferred", 7.8e8, 14),
        "prefill": hist("vllm:request_queue_time_seconds", 0.4, 4, ray=True),
    }
    means = pd_hops.engine_means(before, after)
    assert means["decode"]["kv_transfer"] == {"mean": 500.0, "count": 4}  # 2 s over 4 transfers, in ms
    assert means["decode"]["kv_bytes"] == {"mean": 7e7, "count": 4}
    assert means["prefill"]["queue"] == {"mean": 100.0, "count": 4}  # all new: no reading before


def test_a_histogram_without_new_events_is_left_out():
    same = {"decode": hist("vllm:request_queue_time_seconds", 2.0, 5)}
    assert pd_hops.engine_means(same, same) == {}


def test_series_names_every_histogram_in_both_namings():
    names = pd_hops.series()
    assert "vllm:nixl_xfer_time_seconds_sum" in names and "ray_vllm_nixl_xfer_time_seconds_count" in names
    assert (
        "ray_vllm_request_queue_time_seconds_bucket" in names and "vllm:request_queue_time_seconds_bucket" not in names
    )
    assert len(names) == 5 * len(pd_hops.HISTOGRAMS) + 3  # and Serve's loop lag: sum, count, buckets


def ray_buckets(name: str, cumulative: dict[str, float]) -> list[Sample]:
    return [Sample(f"{pd_hops.ray_name(name)}_bucket", {"le": le}, n) for le, n in cumulative.items()]


def test_under_ray_the_figures_carry_the_bounds_their_buckets_give_not_only_the_midpoint_mean():
    queue = "vllm:request_queue_time_seconds"
    # Two engines; vLLM's first queue buckets are 0.3 and 0.5 s. Ray's sum is bucket midpoints: 0.15 a request.
    before = {"prefill": hist(queue, 0.15, 1, ray=True) + ray_buckets(queue, {"0.3": 1, "0.5": 1, "+Inf": 1})}
    after = {"prefill": hist(queue, 0.15 * 4 + 0.4, 5, ray=True)
             + ray_buckets(queue, {"0.3": 3, "0.5": 3, "+Inf": 3})
             + ray_buckets(queue, {"0.3": 1, "0.5": 2, "+Inf": 2})}  # fmt: skip
    got = pd_hops.engine_means(before, after)["prefill"]["queue"]
    # Four new events: three in (0, 0.3], one in (0.3, 0.5]: the mean lies between 75 and 350 ms.
    assert got == {"mean": 212.5, "count": 4, "bounds": [75.0, 350.0]}  # the midpoint mean: 3 x 150 + 400
    tail = {"prefill": hist(queue, 12.0, 1, ray=True) + ray_buckets(queue, {"0.3": 0, "+Inf": 1})}
    assert pd_hops.engine_means({}, tail)["prefill"]["queue"]["bounds"] == [300.0, None]
    plain = {"prefill": hist(queue, 0.004, 2)}  # `vllm serve`'s sums are exact: no bounds
    assert pd_hops.engine_means({}, plain)["prefill"]["queue"] == {"mean": 2.0, "count": 2}


def test_hop_percentiles_span_each_hop_of_the_requests_that_reached_it():
    rows = [
        {"prefill_sent": 0.0, "prefill_answered": 0.1, "decode_sent": 0.1, "decode_first_byte": 0.3},
        {"prefill_sent": 0.0, "prefill_answered": 0.2, "decode_sent": 0.2, "decode_first_byte": 0.6},
        {"prefill_sent": 0.0, "prefill_answered": 0.5, "decode_sent": None, "decode_first_byte": None},  # failed
    ]
    got = pd_hops.hop_percentiles(rows)
    assert got["prefill"] == {"p50": 200.0, "p95": 500.0}
    assert got["decode_first_byte"] == {"p50": 200.0, "p95": 400.0}
    assert got["total"] == {"p50": 300.0, "p95": 600.0}
    collocated = [{"prefill_sent": None, "decode_sent": 0.0, "decode_first_byte": 0.05}]
    assert set(pd_hops.hop_percentiles(collocated)) == {"decode_first_byte", "total"}


def test_no_bounds_where_the_buckets_do_not_account_for_the_events_between_the_readings():
    queue = "vllm:request_queue_time_seconds"
    # An engine started again between the readings: its buckets went back while the other engine's counted on.
    before = {"decode": hist(queue, 0.45, 3, ray=True) + ray_buckets(queue, {"0.3": 3, "+Inf": 3})}
    after = {"decode": hist(queue, 0.9, 6, ray=True) + ray_buckets(queue, {"0.3": 1, "+Inf": 6})}
    assert pd_hops.engine_means(before, after)["decode"]["queue"] == {"mean": 150.0, "count": 3}


def test_requests_finished_counts_decodes_end_to_end_events_or_every_engines():
    e2e = "vllm:e2e_request_latency_seconds"
    pd_before = {"prefill": hist(e2e, 1.0, 3), "decode": hist(e2e, 2.0, 3, ray=True)}
    pd_after = {"prefill": hist(e2e, 9.0, 40), "decode": hist(e2e, 5.0, 19, ray=True)}
    assert pd_hops.requests_finished(pd_before, pd_after) == 16  # decode's, whatever prefill counted
    two = {"collocated": hist(e2e, 1.0, 5) + hist(e2e, 1.0, 7)}
    assert pd_hops.requests_finished({}, two) == 12
    assert pd_hops.requests_finished(two, two) == 0
    # Decode read, its end-to-end histogram not exported yet: none finished so far (the sweep waits), not unknown.
    assert pd_hops.requests_finished({}, {"decode": hist("vllm:nixl_xfer_time_seconds", 1.0, 4)}) == 0
    assert pd_hops.requests_finished({}, {}) is None


def test_decodes_time_per_token_is_read_by_the_engines_clock_in_either_naming():
    """The engine core stamps each token, so a lagging frontend does not stretch it: read apart from e2e. Under Ray
    vLLM's first buckets (10 and 25 ms) tell a 9.5 ms decode step from a 13 ms one."""
    tpot = "vllm:request_time_per_output_token_seconds"
    plain = {"decode": hist(tpot, 0.0095 * 8, 8) + hist("vllm:request_decode_time_seconds", 1.2 * 8, 8)}
    got = pd_hops.engine_means({}, plain)["decode"]
    assert got["tpot"] == {"mean": 9.5, "count": 8} and got["decode"] == {"mean": 1200.0, "count": 8}
    ray = {"decode": hist(tpot, 0.0175 * 8, 8, ray=True) + ray_buckets(tpot, {"0.01": 0, "0.025": 8, "+Inf": 8})}
    assert pd_hops.engine_means({}, ray)["decode"]["tpot"]["bounds"] == [10.0, 25.0]


def test_each_serve_loops_lag_is_its_own_figure_in_ms_with_its_bucket_bounds():
    """Serve's loop lag is one histogram labelled by loop (Ray 2.58 EventLoopMonitor, buckets 1, 5, 10, 25 ms ...):
    the user code's loop (vLLM's frontend) and the replica's main loop are read apart, not summed into one figure."""
    lag = pd_hops.LOOP_LAG

    def loop(kind: str, total: float, count: float, cumulative: dict[str, float]) -> list[Sample]:
        labels = {"loop_type": kind, "deployment": "Decode:m"}
        return [Sample(f"{lag}_sum", labels, total), Sample(f"{lag}_count", labels, count)] + [
            Sample(f"{lag}_bucket", {**labels, "le": le}, n) for le, n in cumulative.items()
        ]

    before = {
        "decode": loop("user_code", 3.0, 1, {"1.0": 0, "5.0": 1, "10.0": 1, "+Inf": 1})
        + loop("main", 0.5, 1, {"1.0": 1})
    }
    after = {
        "decode": loop("user_code", 3.0 + 7.5 * 2, 3, {"1.0": 0, "5.0": 1, "10.0": 3, "+Inf": 3})
        + loop("main", 0.5 * 5, 5, {"1.0": 5})
        + loop("proxy_loop", 99.0, 9, {"+Inf": 9})  # a loop kind it does not know: not read
    }
    means = pd_hops.engine_means(before, after)["decode"]
    assert means["loop_user_code"] == {"mean": 7.5, "count": 2, "bounds": [5.0, 10.0]}  # both woke 5-10 ms late
    assert means["loop_main"] == {"mean": 0.5, "count": 4, "bounds": [0.0, 1.0]}
    assert set(means) == {"loop_user_code", "loop_main"}
