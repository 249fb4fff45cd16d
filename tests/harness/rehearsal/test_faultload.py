"""The fault rehearsal's client (llmclient/faultload.py) and its gate (rehearsal/checks/faults.py): what one
request is classified as, the clear prefix of a tiny model's greedy answer, a fault's window, the verdicts.
Pure functions, and one request against a loopback server that streams as vLLM does."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web

from llmclient import faultload as fl
from rehearsal.checks import faults


def test_each_request_is_classified_by_what_the_caller_saw():
    hi = ("Hi",)
    assert fl.classify(503, False, "", hi)[0] == fl.FAILED
    assert fl.classify(None, False, "", hi, "ConnectError: refused") == (fl.FAILED, "ConnectError: refused")
    assert fl.classify(200, False, "Hi th", hi, tokens=["Hi", " th"])[0] == fl.CUT
    assert fl.classify(200, True, "", hi)[0] == fl.EMPTY
    assert fl.classify(200, True, "Ho there", hi, tokens=["Ho", " there"])[0] == fl.WRONG
    assert fl.classify(200, True, "Hi there", hi, tokens=["Hi", " there"]) == (fl.OK, "")
    # Compared as tokens: a byte-level token's own text need not start the detokenised answer.
    assert fl.classify(200, True, "é!", ("\\xc3", "\\xa9"), tokens=["\\xc3", "\\xa9", "!"])[0] == fl.OK
    assert fl.classify(200, True, "anything", (), tokens=["any"])[0] == fl.OK  # nothing clear: nothing compared


def test_only_the_clear_prefix_of_a_reference_is_compared():
    ref = fl.Reference("p", ("A", "B", "C", "D"), (2.0, 0.09, 0.001, 3.0))
    assert fl.clear_prefix(ref.margins) == 2
    assert ref.expected() == ("A", "B")  # C is a near tie (0.001 nats): D after it is not compared either
    assert fl.Reference("p", ("A",), (0.005,)).expected() == ()


async def _stream_like_vllm(tokens: list[str]) -> fl.Outcome:
    """One streamed request against a server that follows vLLM 0.26's chat stream with a reasoning parser: no chunk
    for a token whose text is empty unless the request asks return_token_ids."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, token in enumerate(tokens):
            if not token and not body.get("return_token_ids"):
                continue
            logprobs = {"content": [{"token": token, "logprob": -0.1}]} if body.get("logprobs") else None
            reason = "length" if i == len(tokens) - 1 else None
            choice = {
                "index": 0,
                "delta": {"content": token} if token else {},
                "finish_reason": reason,
                "logprobs": logprobs,
            }
            await response.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        ref = fl.Reference("Describe winter.", tuple(tokens), (1.0,) * len(tokens))
        async with aiohttp.ClientSession() as http:
            return await fl.one_request(http, f"http://127.0.0.1:{port}", "m", ref, lambda: 0.0, None)
    finally:
        await runner.cleanup()


def test_a_streamed_token_without_text_of_its_own_still_counts():
    # The CI's stand-in answered 'a', ' decode', '' (a byte-level token that completes no character), '\x05', ...
    outcome = asyncio.run(_stream_like_vllm(["a", " decode", "", "\x05", "J"]))
    assert (outcome.outcome, outcome.detail) == (fl.OK, "")
    assert outcome.text == "a decode\x05J"


def _o(outcome, start, end=None, status=200):
    return fl.Outcome("p", outcome, start, start + 1 if end is None else end, status)


def test_a_window_counts_codes_and_finds_when_the_endpoint_served_again():
    outcomes = [_o(fl.OK, 0), _o(fl.OK, 9.5), _o(fl.FAILED, 11, status=500), _o(fl.FAILED, 13, end=15, status=None),
                _o(fl.CUT, 14), _o(fl.OK, 20), _o(fl.OK, 22), _o(fl.OK, 40)]  # fmt: skip
    w = fl.window("decode-engine", outcomes, t_inject=10.0, t_end=30.0)
    assert w.requests == 6  # ended after 10, started before 30
    assert w.outcomes == {"ok": 3, "wrong": 0, "empty": 0, "cut": 1, "failed": 2}
    assert w.http_codes == {"500": 1, "none": 1}
    assert w.serving_again_s == 10.0  # the first good request after the last bad one started at 20
    assert w.slowest_ok_s == 1.0  # the 2 s failure (13 -> 15) is not an answer
    stalled = fl.window("kv-stall", [_o(fl.OK, 9, end=31), _o(fl.OK, 31)], 10.0, 40.0)
    assert (stalled.serving_again_s, stalled.slowest_ok_s) == (0.0, 22.0)  # no error, one 22 s wait
    assert fl.window("x", [_o(fl.OK, 11)], 10.0, 30.0).serving_again_s == 0.0
    assert fl.window("x", [_o(fl.FAILED, 11, status=503)], 10.0, 30.0).serving_again_s is None


def _row(name, gated, wrong=0, recovered=True):
    outcomes = {"ok": 5, "wrong": wrong, "empty": 0, "cut": 0, "failed": 1}
    again = 12.0 if recovered else None
    return {"fault": name, "gated": gated, "outcomes": outcomes, "recovered": recovered, "bound_s": 600.0,
            "http_codes": {"500": 1}, "serving_again_s": again, "slowest_ok_s": 3.5, "alerts": [],
            "requests": 6}  # fmt: skip


def test_the_gate_fails_on_a_wrong_200_where_gated_and_on_no_recovery():
    assert faults.verdicts([_row("prefill-engine", True)]) == []
    assert faults.verdicts([_row("kv-stall", False, wrong=3)]) == []  # KV path: reported, guarded by the alert
    assert faults.verdicts([_row("decode-engine", True, wrong=1)]) == [
        "decode-engine: 1 response(s) with status 200 and wrong or empty content"
    ]
    assert "did not serve again within 600 s" in faults.verdicts([_row("head", True, recovered=False)])[0]
    # With GCS fault tolerance the point of a head restart is that the engines keep running (same PIDs).
    survived = {"gcs_ft": "redis", "engines_before": {"decode": [7]}, "engines_after": {"decode": [7]}}
    assert faults.verdicts([_row("head", True) | {"facts": survived | {"engines_survived": True}}]) == []
    reloaded = survived | {"engines_after": {"decode": [9]}, "engines_survived": False}
    assert "did not survive the head restart" in faults.verdicts([_row("head", True) | {"facts": reloaded}])[0]
    off = reloaded | {"gcs_ft": "off"}  # without it a reload is what is expected (and measured)
    assert faults.verdicts([_row("head", True) | {"facts": off}]) == []
    table = faults.table([_row("kv-stall", False, wrong=3)])
    assert "kv-stall" in table and "(not gated)" in table and "500x1" in table and "3.5 s" in table


def test_faults_are_chosen_by_name_or_all():
    class Args:
        faults = "all"

    assert [f.name for f in faults.chosen(Args)] == list(faults.FAULTS)
    Args.faults = "head,kv-stall"
    assert [f.name for f in faults.chosen(Args)] == ["head", "kv-stall"]
    Args.faults = "head,typo"
    try:
        faults.chosen(Args)
    except ValueError as err:
        assert "unknown ['typo']" in str(err)
    else:
        raise AssertionError("an unknown fault must be refused")


def test_the_head_fault_lays_out_two_loopback_nodes_a_joining_node_can_reach(tmp_path):
    from rehearsal.ray_cluster import Node, cluster

    class Args:
        faults = "head"
        gcs_ft = "off"

    nodes = faults._nodes(Args, [Node("head", cpus=8)], "run", tmp_path)
    head, worker = nodes
    assert (head.cpus, worker.cpus) == (0, 8)  # the engines go to the worker, as KubeRay's head has num-cpus 0
    ray = cluster(nodes, "run", {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    command = ray.command(worker)
    # Not 127.0.0.1: Ray would turn it into the host's address for a joining node (resolve_ip_for_localhost).
    assert f"--address=127.0.0.2:{ray.gcs_port}" in command and "--node-ip-address=127.0.0.2" in command
    assert ray.node_env(worker)["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"  # Ray refuses a second node with 0
    assert ray.node_env(worker)["RAY_SERVE_WORKER_PROXY_HTTP_PORT"] == Args.worker_proxy.rsplit(":", 1)[1]
    assert [n.ip for n in nodes] == ["127.0.0.2", "127.0.0.2"]  # their metrics endpoints too
    assert faults._nodes(type("A", (), {"faults": "kv-stall"}), [Node("head", cpus=8)], "run", tmp_path)[0].ip == (
        "127.0.0.1"
    )


def test_a_restarted_head_starts_without_the_lost_heads_cluster_address(tmp_path):
    from rehearsal import faults as injected

    (tmp_path / injected.CLUSTER_ADDRESS_FILE).write_text("127.0.0.2:42807")
    injected.forget_cluster_address(tmp_path)
    assert not (tmp_path / injected.CLUSTER_ADDRESS_FILE).exists()
    injected.forget_cluster_address(tmp_path)  # a head that never wrote it: nothing to do


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian's redis-server is not installed here")
def test_the_rehearsals_redis_server_is_stopped_at_exit(tmp_path):
    """redis-server overwrites its environment with its title, so the run's marker cannot find it."""
    from ray_llm_eks.adapters.ports import free_port
    from rehearsal import faults as rehearsal_faults
    from rehearsal.processes import our_pids

    process = rehearsal_faults.start_redis("run-redis-test", free_port(), "a-password-16chars", tmp_path / "redis")
    assert process.poll() is None and process.pid not in our_pids("run-redis-test")
    rehearsal_faults.stop_started_servers()
    assert process.poll() is not None


def test_the_head_fault_through_redis_is_refused_in_one_line_without_redis_server(monkeypatch):
    monkeypatch.setattr(faults.shutil, "which", lambda name: None)
    pd_stack = SimpleNamespace(pd=True)
    with pytest.raises(ValueError, match=r"^--gcs-ft redis: no redis-server on PATH; install"):
        faults._prepare(pd_stack, argparse.Namespace(faults="head", gcs_ft="redis"))
    assert faults._prepare(pd_stack, argparse.Namespace(faults="head", gcs_ft="rocksdb"))  # needs no server


def test_after_an_engine_restart_make_verify_runs_again_and_gates(monkeypatch):
    """A restarted engine brings a new NIXL agent: the KV path is proved again, and a failed proof fails the run."""
    calls = []
    verdict = {"code": 0}

    def run_verify(ctx):
        calls.append(ctx)
        return verdict["code"], ["VERIFY FAILED: 0 of 4 requests read remote KV"] if verdict["code"] else ["ok"]

    monkeypatch.setattr(faults.observability, "run_verify", run_verify)
    ctx = SimpleNamespace(pd=True, timeline=[])
    faults._verify_after_restart(ctx)
    assert calls == [ctx] and ctx.timeline == ["make verify after the engine restart: every request's KV moved"]
    verdict["code"] = 1
    with pytest.raises(faults.RehearsalFailed, match="after the engine restart, VERIFY FAILED: 0 of 4"):
        faults._verify_after_restart(ctx)
    assert set(faults.ENGINE_FAULTS) <= set(faults.FAULTS)


def test_after_a_prefill_kill_the_gate_wants_decode_started_afresh_by_itself():
    """The prefill guard (ray_llm_eks/serve_ingress/prefill_guard.py) must have replaced decode with no step of ours."""
    fresh = {"decode replicas before": ["a"], "decode replicas after": ["b"], "decode_restarted": True}
    assert faults.verdicts([_row("prefill-engine", True) | {"facts": fresh}]) == []
    kept = fresh | {"decode replicas after": ["a"], "decode_restarted": False}
    (line,) = faults.verdicts([_row("prefill-engine", True) | {"facts": kept}])
    assert line.startswith("prefill-engine: the decode replicas did not start afresh after the prefill restart")
