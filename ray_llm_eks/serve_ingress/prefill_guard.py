"""The PD app whose decode replicas start afresh after a prefill restart (prefill_peers.py says why and when),
on Ray 2.58.

Named in the serve config as `import_path: prefill_guard:build_pd_app` for a PD application behind the key
check (ray_llm_eks/domain/serving/serve_config.py). Ray 2.58's decode server asks prefill through a handle, then
hands the answer's kv_transfer_params to its own engine through its KV-connector backend
(serving_patterns/prefill_decode/pd_server.py PDOrchestratorMixin._pd_handle_request:
`backend.prepare_decode_request`, the backend from `self._get_connector_backend()`), and Serve calls each
replica's `check_health` (LLMServer.check_health) every 10 s (serve/_private/constants.py
DEFAULT_HEALTH_CHECK_PERIOD_S), replacing a replica whose check raises. The guard sits in both places. The
builder is Ray's `build_pd_openai_app` with its decode class names pointing at the guarded subclasses while it
runs (as selective_pd.py does, and for the same reason: PDServingArgs has no field for the class)."""

from __future__ import annotations

import contextlib
import logging

from first_chunk import FirstChunkNow
from prefill_peers import PrefillPeers, PrefillRestarted
from ray.llm._internal.serve.serving_patterns.prefill_decode import builder as pd_builder
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import DPPDDecodeServer, PDDecodeServer

logger = logging.getLogger(__name__)


class _GuardedBackend:
    """The decode server's KV-connector backend, each decode request's prefill engine admitted first."""

    def __init__(self, backend, peers: PrefillPeers):
        self._backend, self._peers = backend, peers

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def prepare_decode_request(self, *args, **kwargs):
        request = self._backend.prepare_decode_request(*args, **kwargs)
        try:
            self._peers.admit(getattr(request, "kv_transfer_params", None))
        except PrefillRestarted:
            logger.error("decode refuses requests until Serve replaces it: %s", self._peers.stale)
            raise
        return request


class PrefillGuard:
    """Mixed in before a Ray decode server class."""

    async def __init__(self, *args, **kwargs):
        await super().__init__(*args, **kwargs)
        self._prefill_peers = PrefillPeers()

    def _get_connector_backend(self):
        guarded = getattr(self, "_guarded_backend", None)
        if guarded is None:
            guarded = self._guarded_backend = _GuardedBackend(super()._get_connector_backend(), self._prefill_peers)
        return guarded

    async def check_health(self) -> None:
        await super().check_health()
        self._prefill_peers.check()


# With the stream's first token sent as soon as decode's engine makes it (first_chunk.py).
class GuardedPDDecodeServer(PrefillGuard, FirstChunkNow, PDDecodeServer):
    pass


class GuardedDPPDDecodeServer(PrefillGuard, FirstChunkNow, DPPDDecodeServer):
    pass


@contextlib.contextmanager
def decode_classes(single, data_parallel):
    """Ray's PD builder with these decode classes while it runs."""
    saved = pd_builder.PDDecodeServer, pd_builder.DPPDDecodeServer
    pd_builder.PDDecodeServer, pd_builder.DPPDDecodeServer = single, data_parallel
    try:
        yield
    finally:
        pd_builder.PDDecodeServer, pd_builder.DPPDDecodeServer = saved


def build_pd_app(pd_serving_args: dict):
    """Ray's build_pd_openai_app with the guarded decode servers."""
    with decode_classes(GuardedPDDecodeServer, GuardedDPPDDecodeServer):
        return pd_builder.build_pd_openai_app(pd_serving_args)
