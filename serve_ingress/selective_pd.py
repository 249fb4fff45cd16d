"""Selective PD at Ray 2.58: the PD app whose decode replicas prefill a short prompt themselves.

Named in the serve config as `import_path: selective_pd:build_selective_pd_app` when the stack key
selectivePd is set (domain/serve_config.py). In Ray 2.58 the decode replica calls prefill through a
handle from inside its own `chat` / `completions` (serving_patterns/prefill_decode/pd_server.py
PDDecodeServer.chat -> PDOrchestratorMixin._pd_handle_request), so neither the ingress (it calls decode's
`chat`, which always goes to prefill) nor a request router (it only picks which prefill replica) can skip
prefill: the decode server must. `build_pd_openai_app` hard-codes its decode class (prefill_decode/builder.py
`decode_cls = DPPDDecodeServer if decode_dp_size > 1 else PDDecodeServer`, read from the module's names
when the builder runs) and PDServingArgs has no field for another, so this builder runs Ray's with those
two names pointing at the subclasses below for the duration of the build; everything else (deployment
names Decode:/Prefill:, ingress, options) is Ray's own."""

from __future__ import annotations

import contextlib
import logging

from local_prefill import LOCAL, given_token_count, path_for, threshold, tokenize_fields
from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.llm._internal.serve.serving_patterns.prefill_decode import builder as pd_builder
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import DPPDDecodeServer, PDDecodeServer
from ray.serve import metrics

logger = logging.getLogger(__name__)
REQUESTS_METRIC = "selective_pd_requests"  # Prometheus: ray_selective_pd_requests_total{path="local"|"split"}
PROMPT_TOKENS_METRIC = "selective_pd_prompt_tokens"  # ray_selective_pd_prompt_tokens_total{path}: counted ones


class SelectivePrefill:
    """Mixed in before PDDecodeServer: `chat` and `completions` (also what Ray's direct-streaming routes call)
    serve a short prompt on this replica's engine alone (LLMServer's own methods: no kv_transfer_params, so
    the engine prefills locally and no KV moves) and hand any other to PD's orchestration."""

    async def __init__(self, *args, **kwargs):
        await super().__init__(*args, **kwargs)
        self._local_prefill_below = threshold(self._llm_config.experimental_configs)
        self._path_counter = metrics.Counter(
            REQUESTS_METRIC,
            description="Chat and completion requests a decode replica received, by path: local (prefilled "
            "here, shorter than selectivePd tokens) or split (prefilled by a prefill replica, KV moved).",
            tag_keys=("path",),
        )
        self._tokens_counter = metrics.Counter(
            PROMPT_TOKENS_METRIC,
            description="Prompt tokens of the requests a decode replica counted, by path: the local ones are "
            "prefilled on this engine by design (DecodeRecomputingPrompts leaves them out).",
            tag_keys=("path",),
        )

    async def _prompt_tokens(self, request) -> int | None:
        """The prompt's length as vLLM renders it for this request: its tokenize endpoint on this replica's
        engine (same renderer, chat template and defaults as the chat path); None where it refuses."""
        if not isinstance(request, ChatCompletionRequest) and (count := given_token_count(request.prompt)) is not None:
            return count
        kind = TokenizeChatRequest if isinstance(request, ChatCompletionRequest) else TokenizeCompletionRequest
        fields = tokenize_fields(dict(request), set(request.model_fields_set), set(kind.model_fields))
        try:
            async for answer in self.engine.tokenize(kind.model_validate(fields), None):
                return getattr(answer, "count", None)
        except Exception:  # the split path answers the request with the engine's own error
            logger.debug("selective PD: prompt not counted", exc_info=True)
        return None

    async def _serve(self, method: str, request, raw_request_info):
        below = self._local_prefill_below
        tokens = await self._prompt_tokens(request) if below is not None else None
        path = path_for(tokens, below)
        self._path_counter.inc(tags={"path": path})
        if tokens:
            self._tokens_counter.inc(tokens, tags={"path": path})
        if path == LOCAL:  # LLMServer's own method: this replica's engine, no remote prefill
            return await getattr(LLMServer, method)(self, request, raw_request_info)
        return await getattr(super(), method)(request, raw_request_info)

    async def chat(self, request, raw_request_info=None):
        return await self._serve("chat", request, raw_request_info)

    async def completions(self, request, raw_request_info=None):
        return await self._serve("completions", request, raw_request_info)


class SelectivePDDecodeServer(SelectivePrefill, PDDecodeServer):
    pass


class SelectiveDPPDDecodeServer(SelectivePrefill, DPPDDecodeServer):
    pass


@contextlib.contextmanager
def _decode_classes_replaced():
    saved = pd_builder.PDDecodeServer, pd_builder.DPPDDecodeServer
    pd_builder.PDDecodeServer, pd_builder.DPPDDecodeServer = SelectivePDDecodeServer, SelectiveDPPDDecodeServer
    try:
        yield
    finally:
        pd_builder.PDDecodeServer, pd_builder.DPPDDecodeServer = saved


def build_selective_pd_app(pd_serving_args: dict):
    """Ray's build_pd_openai_app with the selective decode servers."""
    with _decode_classes_replaced():
        return pd_builder.build_pd_openai_app(pd_serving_args)
