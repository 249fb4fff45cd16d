"""A stream's first chunk leaves an LLM replica as soon as the engine makes it
(ray_llm_eks/serve_ingress/stream_chunks.py, as the pods run it), where Ray Serve LLM's own batching holds it for a
whole interval; every LLM server the stack deploys is built with it (first_chunk.py, the PD decode servers, the
collocated configs' server_cls)."""

from __future__ import annotations

import ast
import asyncio

import pytest
from ray.llm._internal.serve.utils.batcher import Batcher

from ray_llm_eks.domain.core import packaged
from ray_llm_eks.serve_ingress.stream_chunks import first_then_every

HOUR = 3600.0
PROMPT = 5.0  # how long a test waits for what must come at once: far above any scheduling delay


class Engine:
    """An engine's stream whose chunks come when the test releases them."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def send(self, *chunks, end: bool = False, error: Exception | None = None) -> None:
        for chunk in chunks:
            self.queue.put_nowait(("chunk", chunk))
        if error is not None:
            self.queue.put_nowait(("error", error))
        elif end:
            self.queue.put_nowait(("end", None))

    async def stream(self):
        try:
            while True:
                kind, value = await self.queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            self.closed = True


async def soon(stream):
    return await asyncio.wait_for(anext(stream), PROMPT)


async def opened(interval_s: float):
    """An engine and the stream over it, its opening chunk (vLLM's role, no text) already sent and read."""
    engine = Engine()
    stream = first_then_every(engine.stream(), interval_s)
    engine.send("role")
    assert await soon(stream) == ["role"]
    return engine, stream


def test_the_first_chunk_comes_at_once_though_the_interval_is_an_hour():
    async def run():
        engine, stream = await opened(HOUR)
        engine.send("t1", "t2", end=True)  # the end sends what is left at once too
        assert await soon(stream) == ["t1", "t2"]
        with pytest.raises(StopAsyncIteration):
            await soon(stream)

    asyncio.run(run())


def test_within_the_first_interval_each_chunk_goes_as_it_comes():
    """vLLM's chat stream opens with the role, no text: the first token's chunk, a step later, must not wait for
    the interval either. Serve reads the stream as it comes, so the reads here wait before the engine sends."""

    async def run():
        engine, stream = await opened(HOUR)
        reading = asyncio.ensure_future(soon(stream))
        engine.send("t1")
        await asyncio.sleep(0.05)
        engine.send("t2")
        assert await reading == ["t1"]
        assert await soon(stream) == ["t2"]

    asyncio.run(run())


def test_an_end_that_comes_while_a_list_is_out_ends_the_stream_at_once():
    async def run():
        engine, stream = await opened(HOUR)  # the stream waits at its list while the engine ends
        engine.send(end=True)
        await asyncio.sleep(0.01)
        with pytest.raises(StopAsyncIteration):
            await soon(stream)

    asyncio.run(run())


def test_rays_own_batching_holds_the_first_chunk_for_its_interval():
    """Why the stack replaces it (Ray 2.58 llm/_internal/serve/utils/batcher.py Batcher.stream). When a Ray upgrade
    sends the first chunk early itself, this fails: the replacement can go."""

    async def run():
        engine = Engine()
        stream = Batcher(engine.stream(), interval_ms=HOUR * 1000).stream()
        engine.send("t1")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(stream), 0.5)

    asyncio.run(run())


def test_after_the_first_interval_chunks_go_in_lists_one_interval_apart():
    async def run():
        clock = asyncio.get_running_loop().time
        engine, stream = await opened(0.5)
        await asyncio.sleep(0.55)  # past the first interval
        engine.send("t1")
        assert await soon(stream) == ["t1"]  # at the next tick
        sent = clock()
        reading = asyncio.ensure_future(soon(stream))
        engine.send("t2")
        await asyncio.sleep(0.05)
        engine.send("t3")  # 50 ms apart, within one interval: one list, as Ray's batching sends them
        assert await reading == ["t2", "t3"]
        assert clock() - sent >= 0.4  # an interval after the list before, not as they came
        engine.send("t4", end=True)
        assert await soon(stream) == ["t4"]

    asyncio.run(run())


def test_an_engine_error_comes_after_the_chunks_before_it():
    async def run():
        engine = Engine()
        stream = first_then_every(engine.stream(), HOUR)
        engine.send("t1", error=ValueError("engine died"))
        assert await soon(stream) == ["t1"]
        with pytest.raises(ValueError, match="engine died"):
            await soon(stream)

    asyncio.run(run())


@pytest.mark.parametrize("how", ["task cancelled", "CancelledError thrown in"])
def test_a_cancelled_stream_stops_reading_the_engine(how):
    """Serve 2.58 ends a replica's stream by cancelling its task or throwing CancelledError into the generator
    (serve/_private/replica.py)."""

    async def run():
        engine, stream = await opened(0.05)
        if how == "task cancelled":
            reading = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.01)
            reading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reading
        else:
            with pytest.raises(asyncio.CancelledError):
                await stream.athrow(asyncio.CancelledError())
        assert engine.closed

    asyncio.run(run())


@pytest.mark.parametrize("interval_s", [HOUR, 0])
def test_closing_the_stream_stops_reading_the_engine(interval_s):
    """A client gone: Serve closes the replica's stream, and the engine's stream must end so vLLM aborts the request."""

    async def run():
        engine = Engine()
        stream = first_then_every(engine.stream(), interval_s)
        engine.send("t1")
        assert await soon(stream) == ["t1"]
        await stream.aclose()
        assert engine.closed

    asyncio.run(run())


def test_interval_zero_sends_each_chunk_alone():
    async def run():
        engine = Engine()
        engine.send("t1", "t2", end=True)
        assert [batch async for batch in first_then_every(engine.stream(), 0)] == [["t1"], ["t2"]]

    asyncio.run(run())


def _bases(module: str) -> dict[str, list[str]]:
    tree = ast.parse(packaged.read_text(packaged.ROOT / "serve_ingress" / module))
    return {node.name: [ast.unparse(b) for b in node.bases] for node in tree.body if isinstance(node, ast.ClassDef)}


@pytest.mark.parametrize("module", ["prefill_guard.py", "selective_pd.py", "first_chunk.py"])
def test_every_llm_server_the_stack_builds_sends_the_first_chunk_at_once(module):
    """Each server class built on one of Ray's has FirstChunkNow before it in its bases (first it would be
    overridden by nothing; after Ray's, Ray's `_batch_output_stream` would win)."""
    rays = {"PDDecodeServer", "DPPDDecodeServer", "llm_server.LLMServer"}
    servers = {name: bases for name, bases in _bases(module).items() if rays & set(bases)}
    assert servers, f"{module} builds no server on Ray's"
    for name, bases in servers.items():
        ray_base = next(i for i, b in enumerate(bases) if b in rays)
        assert "FirstChunkNow" in bases[:ray_base], f"{module} {name}({', '.join(bases)})"
