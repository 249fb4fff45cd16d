"""How an LLM replica groups a streamed response's chunks before Serve carries them to the ingress, free of Ray so
the project's tests run it as the replicas run it (first_chunk.py).

Ray Serve LLM 2.58 sends a stream's chunks in lists, one every `stream_batching_interval_ms` (50 ms unless the LLM
config says otherwise: llm/_internal/serve/constants.py MODEL_RESPONSE_BATCH_TIMEOUT_MS), because each item Serve
streams between replicas costs a round of Ray's streaming protocol. Its `Batcher.stream` (utils/batcher.py) waits out
a whole interval before its first list, so the first token waits for the first tick: up to 50 ms on every request.
In a PD decode replica the wait starts only when prefill has answered and decode's engine has the request, and
decode's first token comes one KV read and one step later, so most of the interval is added to every request's
time to first token. `first_then_every` sends each chunk of the stream's first interval as soon as it comes and
batches the rest as Ray does. The first interval, not the first chunk: vLLM 0.26's chat stream opens with a chunk
that carries the role and no text (entrypoints/openai/chat_completion/serving.py chat_completion_stream_generator),
and where the first token's text is held back (a partial character, a parser) the first text comes a step after it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def first_then_every(items: AsyncIterator[T], interval_s: float) -> AsyncIterator[list[T]]:
    """The chunks of `items` in lists: within `interval_s` of the first chunk each as soon as it comes (with any
    that came with it), then at most one list each `interval_s` of what came since, and the last as soon as `items`
    ends. An error of `items` is raised after the chunks before it; closing this stream cancels the reading of
    `items` (the engine aborts the request). `interval_s` 0: each chunk alone, as it comes."""
    if interval_s == 0:
        async with contextlib.aclosing(items):  # a loop left early does not close what it reads
            async for item in items:
                yield [item]
        return
    came: list[T] = []
    arrived, ended = asyncio.Event(), asyncio.Event()

    async def read() -> None:
        try:
            async for item in items:
                came.append(item)
                arrived.set()
        finally:
            arrived.set()
            ended.set()

    reader = asyncio.create_task(read())
    clock = asyncio.get_running_loop().time
    try:
        await arrived.wait()
        eager_until = clock() + interval_s
        while True:
            finished = reader.done()  # read before the drain: nothing comes between the two
            if came:
                batch = came[:]
                came.clear()
                yield batch
            if finished:
                reader.result()
                return
            with contextlib.suppress(asyncio.TimeoutError):
                if (left := eager_until - clock()) > 0:
                    # What came, or the end, while the list was out goes at once.
                    if not came and not ended.is_set():
                        arrived.clear()
                        await asyncio.wait_for(arrived.wait(), left)
                else:
                    await asyncio.wait_for(ended.wait(), interval_s)
    finally:
        if not reader.done():
            reader.cancel()
            # Waits for the engine's stream to end (vLLM aborts the request as it does) without handing a second
            # cancellation of this stream on to it, which would cut the abort short.
            await asyncio.wait({reader})
        if not reader.cancelled():
            reader.exception()  # retrieved: an error after a closed stream is not logged as never retrieved
