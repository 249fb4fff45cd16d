"""Ray Serve LLM's LLM replicas with a stream's first token sent as soon as it comes (stream_chunks.py says why), on
Ray 2.58.

`LLMServer._run_request` hands a streamed response to `self._batch_output_stream` (llm/_internal/serve/core/server/
llm_server.py), which `FirstChunkNow` replaces: mixed in before a Ray server class, it keeps Ray's interval
(`_get_batch_interval_ms`, the LLM config's `stream_batching_interval_ms`) and changes only how the stream's
first interval goes. The PD decode servers take it in prefill_guard.py and selective_pd.py; a collocated app's LLM
configs name `first_chunk:LLMServer` as their `server_cls` (ray_llm_eks/domain/serving/api_keys.py), which Ray's
builder uses in place of its own (core/server/builder.py build_llm_deployment)."""

from __future__ import annotations

from ray.llm._internal.serve.core.server import llm_server
from stream_chunks import first_then_every

# Without these hooks Ray would batch as it likes and nobody would know: the replica fails at import instead.
if not all(
    callable(getattr(llm_server.LLMServer, hook, None)) for hook in ("_batch_output_stream", "_get_batch_interval_ms")
):
    raise ImportError(
        "ray.llm's LLMServer has no _batch_output_stream or _get_batch_interval_ms to send the first token early"
    )


class FirstChunkNow:
    """Mixed in before a Ray LLM server class."""

    def _batch_output_stream(self, generator):
        # A number for a stream: the LLM config's interval, else Ray's default (LLMServer._get_batch_interval_ms).
        return first_then_every(generator, self._get_batch_interval_ms() / 1000)


# Named as Ray's class because Ray names a collocated deployment after its server class (`LLMServer:<model id>`,
# build_llm_deployment), and the dashboards, alerts and logs know it by that name.
class LLMServer(FirstChunkNow, llm_server.LLMServer):
    pass
