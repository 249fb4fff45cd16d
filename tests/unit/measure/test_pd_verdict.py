"""The PD verdict (measure/pd_verdict.py) from sweep benches: the side-by-side table, the acceptance figures against
two collocated replicas, and the prompt length from which PD pays (selective PD's threshold)."""

from __future__ import annotations

import json

import pytest

from measure import pd_verdict


def _point(tokens: int, in_flight: int, ttft_p50: float, goodput: float, meets: bool = True) -> dict:
    return {"prompt_tokens": tokens, "concurrency": in_flight, "ttft_ms": {"p50": ttft_p50, "p95": ttft_p50 * 1.2},
            "tpot_ms": {"p50": 3.0, "p95": 4.0}, "goodput_rps": goodput, "output_tokens_per_s": goodput * 128,
            "meets_slo": meets}  # fmt: skip


# PD loses to collocated at 300 and 1,000 prompt tokens and wins at 3,500; its TTFT grows 2.5x from 1 to 16 in flight.
PD = pd_verdict.App("pd", tuple(
    _point(*row) for row in [
        (300, 1, 100, 2.0), (300, 16, 300, 9.0),
        (1000, 1, 120, 2.0), (1000, 16, 300, 8.5),
        (3500, 1, 200, 1.5), (3500, 16, 900, 6.0), (3500, 32, 3000, 9.9, False)]))  # fmt: skip
COLLOCATED = pd_verdict.App("collocated", tuple(
    _point(*row) for row in [
        (300, 1, 60, 2.5), (300, 16, 240, 12.0),
        (1000, 1, 80, 2.4), (1000, 16, 400, 10.0),
        (3500, 1, 150, 1.8), (3500, 16, 1500, 5.0)]))  # fmt: skip


def test_the_findings_judge_pd_against_collocated_as_the_bar_says():
    lines = pd_verdict.findings(PD, COLLOCATED)
    growth = next(line for line in lines if "TTFT p50" in line)
    # The most requests in flight measured at ~1,000 tokens is 16: 300 / 120 = 2.5x, within 3x.
    assert "at 16 in flight is 2.50x" in growth and growth.endswith(": met"), growth
    at_1000 = next(line for line in lines if "at 1,000 prompt tokens =" in line)
    assert "8.50 req/s against collocated's 10.00" in at_1000 and "0.85x" in at_1000 and at_1000.endswith(": met")
    # At 3,500 the point of 32 in flight broke the SLO: the best goodput meeting it is 6.0, above collocated's 5.0.
    at_3500 = next(line for line in lines if "at 3,500 prompt tokens =" in line)
    assert "6.00 req/s against collocated's 5.00" in at_3500 and at_3500.endswith(": met"), at_3500
    assert lines[-1].startswith("PD pays from 3,500 prompt tokens and not at 1,000: selectivePd between them")
    # Only PD broke the SLO at 3,500; at 1,000 neither did: those goodputs are the sweep's top.
    assert (
        "every point met the SLO for pd at 1,000; collocated at 1,000 and 3,500 prompt tokens: there the best goodput "
        "is a floor (the sweep's top), not the SLO's limit; a longer sweep is needed to find it"
    ) in lines


def test_a_noisy_win_below_a_loss_sets_no_threshold_and_a_loss_at_the_longest_prompt_says_so():
    noisy = pd_verdict.App("pd", tuple(
        _point(t, 16, 300, good) for t, good in [(300, 13.0), (1000, 9.0), (3500, 6.0)]))  # fmt: skip
    assert pd_verdict.findings(noisy, COLLOCATED)[-1].startswith("PD pays from 3,500 prompt tokens and not at 1,000")
    losing = pd_verdict.App("pd", tuple(_point(t, 16, 300, 1.0) for t in (300, 1000, 3500)))
    lines = pd_verdict.findings(losing, COLLOCATED)
    assert lines[-1].startswith("PD paid at no measured prompt length, the longest 3,500 tokens included")
    judged = [line for line in lines if "best goodput at the SLO 1.00" in line]
    assert len(judged) == 2 and all(line.endswith("not met") for line in judged), lines


def test_a_pd_that_wins_at_short_prompts_and_loses_at_the_longest_gets_no_threshold():
    # PD ahead at 300 tokens, behind at 1,000 and 3,500: a threshold would keep the 300-token prompts, where PD paid,
    # on decode alone. No threshold, and the line says where PD paid.
    shape = pd_verdict.App("pd", tuple(_point(t, 16, 300, good) for t, good in [(300, 14.0), (1000, 9.0), (3500, 4.0)]))
    lines = pd_verdict.findings(shape, COLLOCATED)
    assert (
        lines[-2]
        == "pd against collocated, best goodput at the SLO by prompt tokens: 300 1.17x, 1,000 0.90x, 3,500 0.80x"
    )
    assert lines[-1].startswith("PD paid at 300 prompt tokens but not at the longest measured (3,500): no length")


def test_ttft_growth_is_judged_at_16_in_flight_and_a_longer_sweep_is_shown_beside_it():
    swept = pd_verdict.App("pd", tuple(_point(1000, n, ttft, 1.0) for n, ttft in [(1, 100), (16, 250), (32, 400)]))
    (growth,) = [line for line in pd_verdict.findings(swept, COLLOCATED) if "TTFT p50" in line]
    assert growth == (
        "pd: TTFT p50 at 16 in flight is 2.50x its value at 1 (1,000 prompt tokens; at most 3x wanted; "
        "at 32 in flight 4.00x): met"
    )


def test_the_table_gives_each_app_its_row_and_dollars_from_its_own_throughput():
    text = pd_verdict.table([PD, COLLOCATED], usd_per_hour=3.6)
    rows = text.splitlines()
    assert len(rows) == 2 + len(PD.points) + len(COLLOCATED.points)
    # 3.6 $/h at 9.0 x 128 output tokens/s: 3.6 / (1152 x 3600) x 1e6 = 0.868 $ per million.
    assert "| 300 | 16 | pd | 300.0 / 360.0 | 3.0 / 4.0 | 9.00 | 1,152.0 | 0.868 | yes |" in rows
    assert "| 3,500 | 32 | pd | 3,000.0 / 3,600.0 | 3.0 / 4.0 | 9.90 | 1,267.2 | 0.789 | no |" in rows


def test_the_command_prices_equal_hardware_and_refuses_an_unknown_label(tmp_path, capsys):
    files = {}
    for app in (PD, COLLOCATED):
        files[app.label] = tmp_path / f"{app.label}.json"
        files[app.label].write_text(json.dumps({"points": list(app.points)}))
    args = [f"{label}={path}" for label, path in files.items()]
    assert pd_verdict.main(["--pd", "pd", "--collocated", "collocated", *args]) == 0
    out = capsys.readouterr().out
    assert "$ per hour for each app: 4.0288 (2 x g6.8xlarge on demand in us-east-1, prices of 2026-10-08)" in out
    with pytest.raises(SystemExit):
        pd_verdict.main(["--pd", "ours", "--collocated", "collocated", *args])
    assert "ours: not one of the labels given (pd, collocated)" in capsys.readouterr().err


def test_a_length_where_only_pd_met_the_slo_is_a_win_for_pd():
    broken = pd_verdict.App("collocated", tuple(_point(t, 16, 300, 1.0, meets=(t != 3500)) for t in (300, 1000, 3500)))
    pd = pd_verdict.App("pd", tuple(_point(t, 16, 300, 0.5) for t in (300, 1000, 3500)))
    assert pd_verdict.findings(pd, broken)[-1].startswith("PD pays from 3,500 prompt tokens and not at 1,000")


def test_growth_is_not_judged_without_a_point_at_16_in_flight_and_nothing_without_shared_lengths():
    short = pd_verdict.App("pd", tuple(_point(1000, n, ttft, 1.0) for n, ttft in [(1, 100), (4, 150)]))
    (growth,) = [line for line in pd_verdict.findings(short, COLLOCATED) if "TTFT" in line]
    assert growth == "pd: TTFT growth not judged (1,000 prompt tokens; at most 3x wanted): no TTFT p50 at 16 in flight"
    failed = pd_verdict.App("pd", (_point(1000, 16, 300, 1.0), {**_point(1000, 1, 0, 0.0), "ttft_ms": {"p50": None}}))
    assert "no TTFT p50 at 1 in flight" in pd_verdict.findings(failed, COLLOCATED)[0]
    elsewhere = pd_verdict.App("pd", (_point(8000, 1, 100, 1.0),))
    assert pd_verdict.findings(elsewhere, COLLOCATED) == [
        "no prompt length measured by both pd and collocated: nothing to judge"
    ]


def test_the_yardstick_says_whose_layer_holds_pd_back_where_ours_falls_short():
    # Against COLLOCATED's best goodputs (10.0 at 1,000 and 5.0 at 3,500 prompt tokens): ours 0.85x and 0.80x, so it
    # meets its share at 1,000 only. At 3,500 ours broke the SLO at 32 in flight, as did each yardstick below.
    ours = pd_verdict.App("ours", (_point(1000, 16, 300, 8.5), _point(3500, 16, 300, 4.0),
                                   _point(3500, 32, 3000, 4.5, meets=False)))  # fmt: skip

    def plain(at_3500: float) -> pd_verdict.App:
        return pd_verdict.App("plain", (_point(1000, 16, 300, 7.0), _point(3500, 16, 300, at_3500),
                                        _point(3500, 32, 3000, 9.0, meets=False)))  # fmt: skip

    at_1000, at_3500 = pd_verdict.against_yardstick(ours, plain(5.0), COLLOCATED)
    assert at_1000 == (
        "at 1,000 prompt tokens against collocated's best goodput at the SLO: ours 0.85x, plain 0.70x (at least 0.8x "
        "wanted): ours met its share, the yardstick is not needed (ours, plain, collocated: every point met the SLO, "
        "so these are the sweep's tops)"
    )
    # COLLOCATED broke no SLO at 3,500 either: its goodput there is its sweep's top, and the line says so.
    assert at_3500.endswith(
        "ours 0.80x, plain 1.00x (at least 1x wanted): plain reaches the share: the gap is in what ours adds to the "
        "same engines (collocated: every point met the SLO, so these are the sweep's tops)"
    )
    short = pd_verdict.against_yardstick(ours, plain(4.5), COLLOCATED)[1]
    assert "plain 0.90x (at least 1x wanted): plain does better but falls short too: part of the gap" in short
    same = pd_verdict.against_yardstick(ours, plain(4.0), COLLOCATED)[1]
    assert "plain 0.80x (at least 1x wanted): plain does no better: nothing points at what ours adds" in same
    broken = pd_verdict.App("plain", tuple(_point(t, 16, 300, 1.0, meets=False) for t in (1000, 3500)))
    not_judged = pd_verdict.against_yardstick(ours, broken, COLLOCATED)[1]
    assert not_judged.endswith("not judged, plain met the SLO at no point")
    elsewhere = pd_verdict.App("plain", (_point(8000, 1, 100, 1.0),))
    assert pd_verdict.against_yardstick(ours, elsewhere, COLLOCATED) == [
        "no prompt length measured by ours, plain and collocated: no yardstick"
    ]


def test_the_command_judges_against_the_yardstick_it_is_given(tmp_path, capsys):
    files = {}
    for app in (PD, COLLOCATED, pd_verdict.App("plain", PD.points)):
        files[app.label] = tmp_path / f"{app.label}.json"
        files[app.label].write_text(json.dumps({"points": list(app.points)}))
    args = [f"{label}={path}" for label, path in files.items()]
    assert pd_verdict.main(["--pd", "pd", "--collocated", "collocated", "--yardstick", "plain", *args]) == 0
    assert "- at 3,500 prompt tokens against collocated's best goodput at the SLO: pd 1.20x, plain 1.20x" in (
        capsys.readouterr().out
    )
    with pytest.raises(SystemExit):
        pd_verdict.main(["--pd", "pd", "--collocated", "collocated", "--yardstick", "vllm", *args])
    assert "vllm: not one of the labels given (pd, collocated, plain)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pd_verdict.main(["--pd", "pd", "--collocated", "collocated", "--yardstick", "pd", *args])
    assert "--yardstick pd: another PD app than --pd and --collocated" in capsys.readouterr().err
