"""How an LLM replica groups a streamed response's chunks before Serve carries them to the ingress, free of Ray so
the project's tests run it as the replicas run it (first_chunk.py).

Ray Serve LLM 2.58 sends a stream's chunks in lists, one every `stream_batching_interval_ms` (50 ms unless the LLM
config says otherwise: llm/_internal/serve/constants.py MODEL_RESPONSE_BATCH_TIMEOUT_MS), because each item Serve
streams between replicas costs a round of Ray's streaming protocol. Its `Batcher.stream` (utils/batcher.py) waits out
a whole interval before its first list, so the first token waits for the first tick: up to 50 ms on every request.
In a PD decode replica the wait starts only when prefill has answered and decode's engine has the request, and
decode's first token comes one KV read and one step later, so most of the interval is added to every request's
time to first token. `first_then_every` sends the first chunk as soon as it comes and batches the rest as Ray does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def first_then_every(items: AsyncIterator[T], interval_s: float) -> AsyncIterator[list[T]]:
    """The chunks of `items` in lists: the first list as soon as a chunk is there (with any that came with it),
    then at most one list each `interval_s` of what came since, and the last as soon as `items` ends. An error of
    `items` is raised after the chunks before it; closing this stream cancels the reading of `items` (the engine
    aborts the request). `interval_s` 0: each chunk alone, as it comes."""
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
    try:
        await arrived.wait()
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
                await asyncio.wait_for(ended.wait(), interval_s)
    finally:
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
