"""The prefill guard's rule (ray_llm_eks/serve_ingress/prefill_peers.py): a decode replica that met a prefill engine
now gone refuses to use a new one, and stays refusing (its health check fails, so Serve replaces it); a new
prefill engine beside live ones (a scale-up) is fine. The guard on Ray's real decode server, in the fault
rehearsal (rehearsal/checks/faults.py, prefill-engine)."""

from __future__ import annotations

import socket

import pytest

from ray_llm_eks.serve_ingress.prefill_peers import PrefillPeers, PrefillRestarted, side_channel_answers


def params(engine: str, host: str = "10.0.1.5", port: int = 20000) -> dict:
    """kv_transfer_params as prefill returns them to decode (vLLM 0.26 nixl/base_worker.py request_finished)."""
    return {"remote_engine_id": f"{engine}-{host}-{port}", "remote_host": host, "remote_port": port}


def peers(alive: set[tuple[str, int]]) -> PrefillPeers:
    return PrefillPeers(answers=lambda host, port: (host, port) in alive)


def test_the_same_engine_and_a_new_one_beside_live_ones_pass():
    guard = peers({("10.0.1.5", 20000), ("10.0.1.6", 20000)})
    guard.admit(params("a1"))
    guard.admit(params("a1"))
    guard.admit(params("b1", host="10.0.1.6"))  # a prefill replica added: both answer
    guard.admit(None)  # no remote prefill (a local path): nothing to check
    guard.check()
    assert guard.stale is None


def test_a_new_engine_at_a_restarted_engines_address_makes_decode_stale_for_good():
    guard = peers({("10.0.1.5", 20000)})
    guard.admit(params("old"))
    with pytest.raises(PrefillRestarted, match=r"prefill engine old-10\.0\.1\.5-20000 at 10\.0\.1\.5:20000 is gone"):
        guard.admit(params("new"))  # the restarted replica, same pod and side channel port
    for later in (params("old"), params("new")):
        with pytest.raises(PrefillRestarted):
            guard.admit(later)  # every request from then on fails, never a 200 from stale state
    with pytest.raises(PrefillRestarted):
        guard.check()  # Serve's health check: the replica is replaced


def test_a_new_engine_elsewhere_while_a_met_one_is_gone_makes_decode_stale():
    alive = {("10.0.1.5", 20000)}
    guard = peers(alive)
    guard.admit(params("old"))
    alive.clear()  # the prefill pod went away
    alive.add(("10.0.9.9", 20000))  # and came back with a new address
    with pytest.raises(PrefillRestarted):
        guard.admit(params("new", host="10.0.9.9"))


def test_a_prefill_that_only_went_away_changes_nothing_until_a_new_one_is_used():
    alive = {("10.0.1.5", 20000), ("10.0.1.6", 20000)}
    guard = peers(alive)
    guard.admit(params("a"))
    guard.admit(params("b", host="10.0.1.6"))
    alive.discard(("10.0.1.6", 20000))  # a scale-down
    guard.admit(params("a"))
    guard.check()
    assert guard.stale is None


def test_the_probe_is_a_tcp_connect_to_the_side_channel():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert side_channel_answers("127.0.0.1", port)
    assert not side_channel_answers("127.0.0.1", port)  # closed: refused
