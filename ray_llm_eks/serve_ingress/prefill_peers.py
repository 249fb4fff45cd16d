"""Which prefill engines a decode engine has read KV from, and whether one of them is gone: what decides that a
decode replica must start afresh after a prefill restart. Free of Ray, so the project's tests run it as the
pods do (prefill_guard.py puts it into the decode server).

vLLM 0.26 with NIXL 1.3 keeps a decode engine's state for a prefill agent it met (UCX endpoints, the remote
agent's metadata) after that prefill is gone; the next handshake with a new prefill agent can then segfault
the decode engine or fail its reads, and a failed read on a hybrid model (Qwen3.5) decodes from KV that never
arrived: wrong text with HTTP 200 (vllm-project/vllm #49238, fixes in ai-dynamo/nixl #1986 and
vllm-project/vllm #50047, in no release we pin). The danger starts when a new prefill engine is used while
one the decode engine met before is gone. Ray Serve LLM 2.58 names each prefill engine anew when its replica
starts (`<random>-<host>-<port>`: llm/_internal/serve/engines/vllm/kv_transfer/nixl.py), and prefill's answer
to decode names the engine that holds the request's KV and its NIXL side channel (`remote_engine_id`,
`remote_host`, `remote_port` in kv_transfer_params: vLLM nixl/base_worker.py request_finished).

So: an engine never met before is checked against those met before; one of them gone (its side channel
refuses or does not answer, or the new engine sits at its address) means a prefill restarted, and the decode
replica turns stale: it refuses every request from then on (an error, never a 200) and fails Serve's health
check, so Serve replaces it with a fresh engine. A prefill engine that merely went away (a scale-down) changes
nothing until a new one is used."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

PROBE_SECONDS = 0.5  # a live side channel (ZMQ, TCP) accepts at once; a gone one refuses or stays silent


class PrefillRestarted(RuntimeError):
    """This decode engine met a prefill engine that is gone and would now use a new one: it must start afresh."""


def side_channel_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_SECONDS):
            return True
    except (OSError, ValueError):
        return False


class PrefillPeers:
    """The prefill engines met (engine id -> side channel address), and the stale verdict once reached."""

    def __init__(self, answers: Callable[[str, int], bool] = side_channel_answers):
        self._answers = answers
        self._met: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self.stale: str | None = None  # why this decode replica must start afresh; None: it need not

    def admit(self, params: dict | None) -> None:
        """Before decode reads a request's KV: the prefill engine named in `params` (kv_transfer_params) is one
        met before, or a new one while every one met before is still there. Raises PrefillRestarted otherwise,
        and from then on."""
        engine = (params or {}).get("remote_engine_id")
        with self._lock:
            if self.stale is not None:
                raise PrefillRestarted(self.stale)
            if engine is None or engine in self._met:
                return
            address = (str(params.get("remote_host")), int(params.get("remote_port") or 0))
            for old, (host, port) in self._met.items():
                if (host, port) == address or not self._answers(host, port):
                    self.stale = (
                        f"prefill engine {old} at {host}:{port} is gone and a new one ({engine}) answered: this decode "
                        "engine's NIXL state for the old one is stale (vllm-project/vllm #49238); the replica starts "
                        "afresh"
                    )
                    raise PrefillRestarted(self.stale)
            self._met[engine] = address

    def check(self) -> None:
        """Serve's health check: fails while stale (Serve then replaces the replica)."""
        if self.stale is not None:
            raise PrefillRestarted(self.stale)
