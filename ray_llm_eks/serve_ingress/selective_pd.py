"""Selective PD at Ray 2.58: the PD app whose decode replicas prefill a short prompt themselves.

Named in the serve config as `import_path: selective_pd:build_selective_pd_app` when the stack key
selectivePd is set (ray_llm_eks/domain/serving/serve_config.py). In Ray 2.58 the decode replica calls prefill through a
handle from inside its own `chat` / `completions` (serving_patterns/prefill_decode/pd_server.py
PDDecodeServer.chat -> PDOrchestratorMixin._pd_handle_request), so neither the ingress (it calls decode's
`chat`, which always goes to prefill) nor a request router (it only picks which prefill replica) can skip
prefill: the decode server must. `build_pd_openai_app` hard-codes its decode class (prefill_decode/builder.py
`decode_cls = DPPDDecodeServer if decode_dp_size > 1 else PDDecodeServer`, read from the module's names
when the builder runs) and PDServingArgs has no field for another, so this builder runs Ray's with those
two names pointing at the subclasses below for the duration of the build; everything else (deployment
names Decode:/Prefill:, ingress, options) is Ray's own."""

from __future__ import annotations

import logging

from first_chunk import FirstChunkNow
from local_prefill import LOCAL, given_token_count, path_for, threshold, tokenize_fields
from prefill_guard import PrefillGuard, decode_classes
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
        self._tokenizer = None  # vLLM's ServingTokenization, found or built at the first request
        self._refused = False  # a prompt could not be counted (logged once as a warning)
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

    def _tokenization(self):
        """vLLM's tokenize server on this replica's engine. Ray 2.58 looks for it under init_app_state's name
        `openai_serving_tokenization` (engines/vllm/vllm_engine.py VLLMEngine.start), which vLLM 0.26 calls
        `serving_tokenization` (entrypoints/openai/api_server.py init_app_state), so Ray's own tokenize answers
        "This model does not support the 'tokenization' task". Where Ray found none: the ServingTokenization
        vLLM builds there, from the engine's chat server's own parts (its models, renderer, chat template and
        defaults), so the count is the chat path's."""
        if self._tokenizer is None:
            self._tokenizer = getattr(self.engine, "_oai_serving_tokenization", None)
        if self._tokenizer is None:
            from vllm.entrypoints.serve.tokenize.serving import ServingTokenization

            chat = self.engine._oai_serving_chat
            self._tokenizer = ServingTokenization(
                chat.models,
                chat.online_renderer,
                request_logger=chat.request_logger,
                chat_template=chat.chat_template,
                chat_template_content_format=chat.chat_template_content_format,
                default_chat_template_kwargs=chat.default_chat_template_kwargs,
                trust_request_chat_template=chat.trust_request_chat_template,
            )
        return self._tokenizer

    async def _prompt_tokens(self, request) -> int | None:
        """The prompt's length as vLLM renders it for this request: its tokenize server on this replica's
        engine (same renderer, chat template and defaults as the chat path); None where it refuses (the first
        refusal logged as a warning: until it is fixed every request takes the split path)."""
        if not isinstance(request, ChatCompletionRequest) and (count := given_token_count(request.prompt)) is not None:
            return count
        kind = TokenizeChatRequest if isinstance(request, ChatCompletionRequest) else TokenizeCompletionRequest
        fields = tokenize_fields(dict(request), set(request.model_fields_set), set(kind.model_fields))
        try:
            answer = await self._tokenization().create_tokenize(kind.model_validate(fields), None)
        except Exception as exc:  # the split path answers the request with the engine's own error
            answer = exc
        count = getattr(answer, "count", None)
        if count is None:
            log = logger.debug if self._refused else logger.warning
            self._refused = True
            log("selective PD: prompt not counted, split path: %s", getattr(answer, "error", answer))
        return count

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


# With the prefill guard (prefill_guard.py): the split path reads KV from prefill like any PD decode server; both
# paths send a stream's first token as soon as it comes (first_chunk.py).
class SelectivePDDecodeServer(SelectivePrefill, PrefillGuard, FirstChunkNow, PDDecodeServer):
    pass


class SelectiveDPPDDecodeServer(SelectivePrefill, PrefillGuard, FirstChunkNow, DPPDDecodeServer):
    pass


def build_selective_pd_app(pd_serving_args: dict):
    """Ray's build_pd_openai_app with the selective decode servers."""
    with decode_classes(SelectivePDDecodeServer, SelectiveDPPDDecodeServer):
        return pd_builder.build_pd_openai_app(pd_serving_args)
