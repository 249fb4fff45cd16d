"""The endpoint client (make smoke, make bench) against a local OpenAI-like streaming server on loopback:
good answers, HTTP errors, stalls, malformed events; `make bench` up to its load generator."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from llmclient import core, smoke
from llmclient.__main__ import main
from measure import kv_proof
from tests.conftest import ROOT

MODEL = "test/model"


class Handler(BaseHTTPRequestHandler):
    mode = "ok"  # set per test through the server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, code: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refused(self) -> bool:
        """The key check of a keyed endpoint (server.key set); server.key_check False: any key passes."""
        key = self.server.key
        if key is None or (self.server.key_check is False and self.headers.get("Authorization")):
            return False
        if self.headers.get("Authorization") == f"Bearer {key}":
            return False
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._json(401, {"error": {"message": "Missing or invalid API key", "code": "invalid_api_key"}})
        return True

    def _trickle(self):
        """Headers one byte at a time, each well inside the client's stall timeout: only a deadline ends it."""
        for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 10_000:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.2)

    def do_GET(self):
        if self.server.mode == "trickle":
            return self._trickle()
        if self.path != "/metrics" and self._refused():
            return None
        if self.path == "/v1/models":
            card = {"id": MODEL, "object": "model", "owned_by": "x"}
            if self.server.context:  # as Ray Serve LLM 2.58 says it (openai_api_models.py to_model_metadata)
                card["metadata"] = {"model_id": MODEL, "max_request_context_length": self.server.context}
            return self._json(200, {"object": "list", "data": [card]})
        if self.path == "/metrics":
            n = self.server.requests
            # One NIXL transfer per request, or (mode "kv_broken") one failed transfer each and no bytes.
            moved, failed = (0, n) if self.server.mode == "kv_broken" else (n, 0)
            text = (
                f'ray_serve_deployment_request_counter_total{{deployment="PDPrefillServer:m",route="/"}} {n}\n'
                f'ray_serve_deployment_request_counter_total{{deployment="PDDecodeServer:m",route="/"}} {n}\n'
                f'ray_serve_deployment_request_counter_total{{deployment="OpenAiIngress",route="/"}} {n}\n'
                f'ray_vllm_nixl_bytes_transferred_bucket{{WorkerId="d",le="+Inf"}} {moved}\n'
                f'ray_vllm_nixl_num_failed_transfers_total{{WorkerId="d"}} {failed}\n'
                + "".join(f'ray_selective_pd_requests_total{{path="{p}"}} {c}\n' for p, c in self.server.paths.items())
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return None
        return self._json(404, {"error": {"message": "no such route"}})

    def _chunk(self, payload: str):
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _tools(self, request: dict):
        """vLLM 0.26's answers to a request with tools: refused without a tool call parser (mode no_parser, its
        own message), else a call of the function tool_choice names (a JSON argument string), or text for auto."""
        if self.server.mode == "no_parser":
            message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            return self._json(400, {"error": {"message": message, "type": "BadRequestError", "code": 400}})
        message = {"role": "assistant", "content": "Hello"}
        choice = request.get("tool_choice")
        if isinstance(choice, dict):
            call = {"name": choice["function"]["name"], "arguments": '{"city": "Paris"}'}
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": call}],
            }
        self.server.tool_choices.append(choice)
        body = {"id": "c1", "object": "chat.completion", "created": 0, "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}  # fmt: skip
        return self._json(200, body)

    def do_POST(self):
        if self._refused():
            return None
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        mode = self.server.mode
        self.server.requests += 1
        if mode == "selective":  # a selective PD ingress: prompts over 100 words go through prefill
            words_in = len(request["messages"][-1]["content"].split())
            path = "split" if words_in > 100 else "local"
            self.server.paths[path] = self.server.paths.get(path, 0) + 1
        too_long = mode == "long500" and len(request["messages"][-1]["content"].split()) > 600
        if mode == "http500" or too_long:
            return self._json(500, {"error": {"message": "engine exploded", "type": "InternalServerError"}})
        words = ["Hello", " there", "!", " How", " are", " you", "?"][: request.get("max_tokens", 7)]
        if request.get("tools"):
            return self._tools(request)
        if not request.get("stream"):
            return self._json(
                200,
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": MODEL,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(words)},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": len(words), "total_tokens": 5 + len(words)},
                },
            )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        if mode == "endless":  # a server that ignores max_tokens and never ends the stream
            while True:
                choice = {"index": 0, "delta": {"content": "la"}, "finish_reason": None}
                self._chunk(json.dumps({**base, "choices": [choice]}))
        for i, word in enumerate(words):
            if mode == "stall" and i == 2:
                time.sleep(3)  # longer than the client's stall timeout
            if mode == "malformed" and i == 1:
                self._chunk("{this is not json")
                continue
            choice = {"index": 0, "delta": {"content": word}, "finish_reason": None}
            self._chunk(json.dumps({**base, "choices": [choice]}))
            time.sleep(0.01)
        if mode != "no_finish":
            self._chunk(json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        # server.tokenizer: count 1.25 tokens a word of the last message and 12 for the chat template.
        prompt = int(1.25 * len(request["messages"][-1]["content"].split())) + 12 if self.server.tokenizer else 5
        usage = {"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)}
        self._chunk(json.dumps({**base, "choices": [], "usage": usage}))
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        return None


@pytest.fixture(autouse=True)
def _leave_an_event_loop():
    """asyncio.run() leaves the main thread without a loop; the Pulumi tests after these need one."""
    yield
    asyncio.set_event_loop(asyncio.new_event_loop())


class QuietServer(ThreadingHTTPServer):
    """A client that gives up (a timeout on a loaded machine) leaves its handler writing to a closed socket:
    socketserver prints that traceback to stderr, which the tests read as the program's own output."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def server():
    httpd = QuietServer(("127.0.0.1", 0), Handler)
    httpd.mode = "ok"
    httpd.requests = 0
    httpd.paths, httpd.tokenizer = {}, False
    httpd.key, httpd.key_check = None, True
    httpd.tool_choices, httpd.context = [], None
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(httpd) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_api_base_accepts_both_forms():
    assert core.api_base("http://h:8000") == "http://h:8000/v1"
    assert core.api_base("http://h:8000/v1/") == "http://h:8000/v1"


def test_smoke_passes_and_shows_prefill_and_decode(server):
    result = asyncio.run(smoke.run(url(server), metrics_url=f"{url(server)}/metrics", expect_pd=True))
    assert result.model == MODEL
    assert result.answer == "Hello there! How are you?"
    assert result.streamed == "Hello there! How are you?"
    assert result.ttft is not None and result.ttft > 0
    assert result.pd_evidence["prefill"] >= 2 and result.pd_evidence["decode"] >= 2
    assert "KV moved over NIXL: 4 transfer(s) for 4 requests, none failed" in result.lines  # with the 2 tool calls


def test_smoke_expecting_pd_fails_when_the_kv_did_not_move(server, monkeypatch):
    # Both sides served and answered 200, as vLLM does when decode's KV read fails on a hybrid model.
    server.mode = "kv_broken"
    monkeypatch.setattr(smoke, "METRICS_WAIT", 2.0)
    with pytest.raises(smoke.SmokeError, match="the KV did not move for every request: 0 NIXL transfer"):
        asyncio.run(smoke.run(url(server), metrics_url=f"{url(server)}/metrics", expect_pd=True))


def test_smoke_with_a_key_proves_no_key_and_a_wrong_key_are_refused(server):
    server.key = "sk-right-key-0123456789"
    result = asyncio.run(smoke.run(url(server), api_key=server.key))
    assert result.lines[0] == (
        "API key: no key -> 401, wrong key -> 401, no key, chat -> 401, wrong key, chat -> 401, right key -> 200"
    )
    with pytest.raises(smoke.SmokeError, match=r"API key check: right key -> HTTP 401, expected 200"):
        asyncio.run(smoke.run(url(server), api_key="sk-not-the-key-0123456"))


def test_smoke_calls_a_tool_as_openai_clients_do(server):
    result = asyncio.run(smoke.run(url(server)))
    assert (
        "tools: tool_choice auto accepted (0 call(s)); tool_choice get_weather -> a get_weather call, arguments "
        '{"city": "Paris"}'
    ) in result.lines
    assert server.tool_choices == ["auto", {"type": "function", "function": {"name": "get_weather"}}]
    result = asyncio.run(smoke.run(url(server), tools=False))
    assert "tools: not checked (--no-tools)" in result.lines and len(server.tool_choices) == 2


def test_smoke_names_what_a_model_served_without_a_tool_parser_lacks(server):
    server.mode = "no_parser"
    with pytest.raises(smoke.SmokeError) as failed:
        asyncio.run(smoke.run(url(server)))
    message = str(failed.value)
    assert message.startswith("tools: the endpoint refuses a request with tools: HTTP 400: ")
    assert "--tool-call-parser" in message and "needs a tool_call_parser" in message


def test_smoke_without_a_key_says_so_or_fails_where_the_endpoint_wants_one(server):
    result = asyncio.run(smoke.run(url(server)))
    assert result.lines[0].startswith("API key: none given (OPENAI_API_KEY is unset) and /v1/models answered HTTP 200")
    server.key = "sk-right-key-0123456789"
    with pytest.raises(smoke.SmokeError, match=r"refuses requests without an API key \(HTTP 401\).*OPENAI_API_KEY"):
        asyncio.run(smoke.run(url(server)))


def test_a_url_without_a_scheme_is_one_line(capsys):
    assert main(["smoke", "localhost:8000"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "smoke FAILED: URL=localhost:8000: an http:// or https:// URL with a host, e.g. http://localhost:8000\n"
    )


def test_the_deadline_bounds_a_server_that_trickles_its_answer(server):
    """The key check's plain requests too: each byte comes within the 5 s stall timeout, the 2 s deadline ends it."""
    server.mode, server.key = "trickle", "sk-right-key-0123456789"
    started = time.monotonic()
    with pytest.raises(smoke.SmokeError, match="key check, no key: deadline exceeded"):
        asyncio.run(smoke.run(url(server), api_key=server.key, timeout=5.0, deadline=2.0))
    assert time.monotonic() - started < 10


def test_a_stream_past_max_tokens_is_cut_not_read_into_memory(server):
    server.mode = "endless"
    result = asyncio.run(_stream(server, timeout=5.0, deadline=30.0))
    assert not result.ok and result.error.startswith("the stream went on past 23 chunks for max_tokens 7")
    assert result.latency < 10  # cut at once, not read on until the 30 s deadline


def test_smoke_fails_on_an_endpoint_that_takes_any_key(server):
    server.key, server.key_check = "sk-right-key-0123456789", False
    with pytest.raises(smoke.SmokeError) as failed:
        asyncio.run(smoke.run(url(server), api_key=server.key))
    assert "wrong key -> HTTP 200, expected 401" in str(failed.value)
    assert "wrong key, chat -> HTTP 200, expected 401" in str(failed.value)
    assert "no key -> 401" in str(failed.value)  # no key at all is still refused by this one


def test_requests_are_summed_over_the_metrics_of_every_ray_node(server):
    server.requests = 3
    one = core.deployment_requests(f"{url(server)}/metrics")
    assert one == {"PDPrefillServer:m": 3.0, "PDDecodeServer:m": 3.0, "OpenAiIngress": 3.0}
    both = core.deployment_requests(",".join([f"{url(server)}/metrics"] * 2))  # two nodes' endpoints
    assert both == {name: 2 * count for name, count in one.items()}


def test_smoke_cli_fails_on_an_http_error(server, capsys):
    server.mode = "http500"
    assert main(["smoke", url(server), "--timeout", "5"]) == 1
    assert "HTTP 500" in capsys.readouterr().err


async def _stream(server, timeout: float, deadline: float):
    async with core.client(url(server), timeout=timeout) as api:
        return await core.stream_chat(api, MODEL, [{"role": "user", "content": "hi"}], 7, deadline=deadline)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("stall", "timed out"), ("malformed", ""), ("no_finish", "without a finish_reason"), ("http500", "HTTP 500")],
)
def test_a_bad_stream_is_an_error_not_a_hang(server, mode, expected):
    """The stall lasts 3 s and then the stream goes on: only the client's 1 s stall timeout makes it an
    error, so the error itself shows the timeout fired (no wall-clock bound needed)."""
    server.mode = mode
    result = asyncio.run(_stream(server, timeout=1.0, deadline=10.0))
    assert not result.ok
    assert expected in result.error


def test_the_deadline_bounds_a_slow_stream(server):
    server.mode = "stall"
    result = asyncio.run(_stream(server, timeout=10.0, deadline=1.0))  # the stall alone would not trip
    assert not result.ok and result.error == "deadline exceeded"


def test_bench_refuses_a_short_sweep_in_one_line(server, tmp_path, capsys):
    assert main(["bench", url(server), "--out", str(tmp_path), "--sweep", "concurrency:1,2,4"]) == 2
    err = capsys.readouterr().err
    assert "at least 4 distinct increasing load points" in err and err.count("\n") == 1


def test_bench_writes_the_generators_config_without_the_key(server, tmp_path, monkeypatch, capsys):
    """Up to the load generator itself (its venv is absent here: the message says how to get it)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("RAY_LLM_EKS_BENCH_VENV", str(tmp_path / "no-venv"))
    assert main(["bench", url(server), "--out", str(tmp_path / "run"), "--tokenizer", "gpt2"]) == 1
    assert "make bench-venv" in capsys.readouterr().err
    written = (tmp_path / "run" / "concurrency-1" / "aiperf.yaml").read_text()
    assert "sk-secret-value" not in written and "${OPENAI_API_KEY}" in written
    assert f"model: {MODEL}" in written  # the first model the endpoint lists


TOKENIZER_FAILURE = ROOT / "tests" / "data" / "aiperf-0.13.0-tokenizer-failure.log"


def fake_aiperf(venv: Path) -> None:
    """An AIPerf that fails as AIPerf 0.13.0 does on a tokenizer it cannot load: the traceback (stderr) and the
    panel (stdout) of common/tokenizer_validator.py _prefetch_tokenizers, for the tokenizer its config names,
    then exit 1. The log is what that code prints: the panel rendered by the wheel's own
    tokenizer_display.display_tokenizer_validation_error, the error text transformers 5.24.0 raises."""
    _aiperf_script(
        venv,
        f"log = open({str(TOKENIZER_FAILURE)!r}).read()\n"
        "log = log.replace('acme-llama', config['benchmark']['tokenizer']['name'])\n"
        "traceback, panel = log.split('\\n\\n\u256d', 1)\n"
        "sys.stderr.write(traceback + '\\n')\n"
        "sys.stdout.write('\u256d' + panel)\n",
    )


def _aiperf_script(venv: Path, body: str) -> None:
    """An `aiperf` in `venv` that reads its --config (as `config`), runs `body`, then exits 1."""
    script = venv / "bin" / "aiperf"
    script.parent.mkdir(parents=True)
    script.write_text(
        f"#!{sys.executable}\nimport json, pathlib, sys, yaml\n"
        "config = yaml.safe_load(open(sys.argv[sys.argv.index('--config') + 1]))\n" + body + "sys.exit(1)\n"
    )
    script.chmod(0o755)


def test_bench_says_which_tokenizer_aiperf_could_not_load_and_the_way_out(server, tmp_path, monkeypatch, capsys):
    """A model served under its own name: AIPerf cannot load a tokenizer of that name; the one line says so."""
    fake_aiperf(tmp_path / "venv")
    monkeypatch.setenv("RAY_LLM_EKS_BENCH_VENV", str(tmp_path / "venv"))
    assert main(["bench", url(server), "--out", str(tmp_path / "run"), "--model", "acme-llama"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no reason logged" not in err
    assert err.startswith(
        "bench FAILED: AIPerf exited 1: AIPerf could not load the tokenizer 'acme-llama' (OSError: acme-llama is not "
        "a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'): pass "
        "--tokenizer with the served model's Hugging Face id or a local directory of its tokenizer files"
    )


def test_bench_with_a_stack_takes_the_tokenizer_from_its_model_source(server, tmp_path, monkeypatch, capsys):
    """A stack that serves Qwen/Qwen3.5-9B under its own name: the tokenizer is the model source's."""
    from ray_llm_eks.adapters import stack as stack_adapter

    own_name = {"ray-llm-eks:modelId": "acme-llama", "ray-llm-eks:modelSource": "Qwen/Qwen3.5-9B"}
    stack_file = stack_adapter.stack_file
    monkeypatch.setattr(stack_adapter, "stack_file", lambda stack, root: stack_file(stack, root, overrides=own_name))
    monkeypatch.setenv("RAY_LLM_EKS_BENCH_VENV", str(tmp_path / "no-venv"))
    out = tmp_path / "run"
    assert main(["bench", url(server), "--out", str(out), "--model", "acme-llama", "--stack", "dev"]) == 1
    assert "tokenizer Qwen/Qwen3.5-9B from stack dev's model source" in capsys.readouterr().out
    written = yaml.safe_load((out / "concurrency-1" / "aiperf.yaml").read_text())["benchmark"]
    assert (written["model"], written["tokenizer"]["name"]) == ("acme-llama", "Qwen/Qwen3.5-9B")


CONTEXT_400 = (
    "This model's maximum context length is 256 tokens. However, you requested 640 tokens (512 in the messages, "
    "128 in the completion). Please reduce the length of the messages or completion."
)


def failing_aiperf(venv: Path) -> None:
    """An AIPerf whose every request got vLLM's HTTP 400 for a prompt longer than the context: its per-request
    records (profile_export.jsonl: `error` with code, type and the server's body as message), then its closing
    line and exit 1, as AIPerf 0.13.0 ends such a run."""
    body = json.dumps({"error": {"message": CONTEXT_400, "type": "BadRequestError", "param": None, "code": 400}})
    record = {
        "metadata": {"session_num": 0},
        "metrics": {},
        "error": {"code": 400, "type": "Bad Request", "message": body},
    }
    _aiperf_script(
        venv,
        "out = pathlib.Path(config['benchmark']['artifacts']['dir'])\n"
        "out.mkdir(parents=True, exist_ok=True)\n"
        f"(out / 'profile_export.jsonl').write_text({json.dumps(json.dumps(record))} + '\\n')\n"
        "print('ERROR All 64 inference request(s) failed. No successful responses were received.')\n",
    )


def test_bench_says_the_servers_reason_when_every_request_failed(server, tmp_path, monkeypatch, capsys):
    failing_aiperf(tmp_path / "venv")
    monkeypatch.setenv("RAY_LLM_EKS_BENCH_VENV", str(tmp_path / "venv"))
    assert main(["bench", url(server), "--out", str(tmp_path / "run"), "--tokenizer", "gpt2"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "bench FAILED: AIPerf exited 1: 1 of 1 requests failed; the server answered 1 of them with HTTP 400: "
        "This model's maximum context length is 256 tokens."
    )


def test_bench_fits_its_default_lengths_to_the_served_context_or_names_the_flag(server, tmp_path, monkeypatch, capsys):
    server.context = 256
    monkeypatch.setenv("RAY_LLM_EKS_BENCH_VENV", str(tmp_path / "no-venv"))
    assert main(["bench", url(server), "--out", str(tmp_path / "run"), "--tokenizer", "gpt2"]) == 1
    out = capsys.readouterr().out
    assert "the endpoint serves 256 tokens of context (max_model_len): prompts of 128 tokens and answers of 64" in out
    config = yaml.safe_load((tmp_path / "run" / "concurrency-1" / "aiperf.yaml").read_text())
    prompts = config["benchmark"]["dataset"]["prompts"]
    assert (prompts["isl"]["mean"], prompts["osl"]["mean"]) == (128, 64)
    assert main(["bench", url(server), "--out", str(tmp_path / "run2"), "--isl", "512"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "bench FAILED: invalid config bench --isl + --osl = 512 + 128: at most 192 tokens a request: the endpoint "
        "serves 256 tokens of context (max_model_len), 64 of them left for the chat template\n"
    )


def test_compare_needs_two_runs(tmp_path):
    with pytest.raises(SystemExit):
        main(["compare", str(tmp_path / "a.json"), "--out", str(tmp_path / "c.png")])


def test_the_rehearsals_quick_bench_measures_through_the_same_client(server, tmp_path):
    """rehearsal.checks.quick_bench (what a GPU machine without the bench venv runs), against this server."""
    import argparse

    from rehearsal.checks import quick_bench
    from rehearsal.context import Clock, Context, RehearsalFailed

    args = argparse.Namespace(quick_bench=tmp_path / "quick.json")
    ctx = Context(args, {}, url(server), None, MODEL, False, "", list, [], tmp_path, "r", Clock(), "llm")
    quick_bench.QUICK_BENCH.run(ctx)  # CPU engines: 8 requests, 2 at a time
    figures = json.loads(args.quick_bench.read_text())
    assert (figures["requests"], figures["failed"], figures["output_tokens"]) == (8, 0, 8 * 7)
    assert figures["ttft_ms"][str(50)] > 0 and figures["itl_ms"][str(95)] >= figures["itl_ms"][str(50)] > 0
    assert ctx.timeline[0].startswith("quick bench: 8 requests, 2 at a time, prompt ~5.0 tokens, 32 out: TTFT")
    assert quick_bench.percentile([5.0, 1.0, 3.0, 2.0], 50) == 2.0 and quick_bench.percentile([], 95) is None
    server.mode = "http500"  # every request fails: named in one line
    with pytest.raises(RehearsalFailed, match=r"quick bench: 8 requests failed; first: HTTP 500"):
        quick_bench.QUICK_BENCH.run(ctx)


def test_the_sweep_bench_reports_goodput_and_the_path_of_each_point(server, tmp_path):
    """rehearsal.checks.sweep_bench against this server playing a selective PD app: each point's figures, the
    path its requests took (from the ingress's counter, before and after the point), and failures named."""
    import argparse

    from rehearsal.checks import sweep_bench
    from rehearsal.context import Clock, Context, RehearsalFailed

    server.mode, server.tokenizer = "selective", True
    args = argparse.Namespace(sweep_bench=tmp_path / "sweep.json", sweep_prompts=(50, 500), sweep_concurrency=(1, 8),
                              sweep_max_tokens=sweep_bench.MAX_TOKENS)  # fmt: skip
    ctx = Context(args, {}, url(server), None, MODEL, True, "", lambda: [f"{url(server)}/metrics"], [], tmp_path, "r",
                  Clock(), "llm")  # fmt: skip
    sweep_bench.SWEEP_BENCH.run(ctx)
    result = json.loads(args.sweep_bench.read_text())
    assert result["slo"] == {"ttft_ms": 2000, "tpot_ms": 100}
    shapes = [(p["prompt_tokens"], p["concurrency"], p["requests"]) for p in result["points"]]
    assert shapes == [(50, 1, 8), (50, 8, 16), (500, 1, 8), (500, 8, 16)]
    # Calibrated on this server's "tokenizer": 50 tokens -> 30 words, 500 -> 390; each point's prompts made that many
    assert result["calibration"] == [[100, 12 + int(1.25 * 105)], [500, 12 + int(1.25 * 505)]]
    assert [p["prompt_tokens_mean"] for p in result["points"]] == [50.0, 50.0, 500.0, 500.0]
    # 30 words take the local path, 390 the split one (so did the warm-up and the 500-word calibration)
    assert [p["paths"] for p in result["points"]] == [
        {"local": 8.0, "split": 0.0},
        {"local": 16.0, "split": 0.0},
        {"local": 0.0, "split": 8.0},
        {"local": 0.0, "split": 16.0},
    ]
    first = result["points"][0]
    assert first["failed"] == 0 and first["meets_slo"] and first["good_fraction"] == 1.0
    assert first["goodput_rps"] > 0 and first["tpot_ms"]["p95"] >= first["tpot_ms"]["p50"] > 0
    server.mode = "stall"  # a 3 s gap in every answer: TPOT over 100 ms, so no request is good
    args.sweep_prompts, args.sweep_concurrency = (50,), (8,)
    sweep_bench.SWEEP_BENCH.run(ctx)
    point = json.loads(args.sweep_bench.read_text())["points"][0]
    assert (point["good_fraction"], point["meets_slo"], point["goodput_rps"]) == (0.0, False, 0.0)
    server.mode = "http500"
    with pytest.raises(RehearsalFailed, match=r"sweep bench: the calibration request of 100 words failed: HTTP 500"):
        sweep_bench.SWEEP_BENCH.run(ctx)
    server.mode, args.sweep_prompts = "long500", (1000,)  # only the point's prompts are over 600 words
    with pytest.raises(RehearsalFailed, match=r"sweep bench: 16 requests failed; first: HTTP 500"):
        sweep_bench.SWEEP_BENCH.run(ctx)


def test_the_sweep_line_gives_rays_bucket_bounds_not_their_midpoint_mean():
    from rehearsal.checks import sweep_bench

    decode = {"queue": {"mean": 150.0, "count": 8, "bounds": [0.0, 300.0]}, "kv_transfer": {"mean": 1.2, "count": 8}}
    decode["kv_bytes"] = {"mean": 83886080.0, "count": 8, "bounds": [2.0**25, 2.0**27]}
    decode["tpot"] = {"mean": 17.5, "count": 8, "bounds": [10.0, 25.0]}
    decode["loop_user_code"] = {"mean": 3.0, "count": 40, "bounds": [1.0, 5.0]}  # Serve's loop lag: ms already
    # A PD prefill engine's TPOT is vLLM's 0 for its one token: not shown.
    prefill = {"queue": {"mean": 7000.0, "count": 2, "bounds": [5000.0, None]}, "tpot": {"mean": 0.0, "count": 2}}
    figures = {"engines": {"decode": decode, "prefill": prefill}}
    assert sweep_bench._where(figures) == (
        "decode: queue 0-300 ms, kv_transfer 1.2 ms, kv_bytes 32 MiB-128 MiB, tpot 10-25 ms, loop_user_code 1-5 ms; "
        "prefill: queue 5000-inf ms"
    )


def test_the_sweep_waits_for_the_engines_histograms_to_hold_the_points_requests(tmp_path, monkeypatch):
    """Ray exports each worker's histograms every 2 s, so a reading right after a point misses its last requests. The
    sweep reads again until decode's end-to-end count holds them, then once more an export later for prefill's (its
    worker exports on its own cycle); where the count never matches, the point's line says so."""
    import argparse

    from measure import pd_hops
    from measure.kv_proof import Sample
    from rehearsal.checks import sweep_bench
    from rehearsal.context import Clock, Context

    e2e = pd_hops.ray_name("vllm:e2e_request_latency_seconds")
    queue = pd_hops.ray_name("vllm:request_queue_time_seconds")

    def histograms(done: int) -> list[Sample]:
        return [Sample(f"{e2e}_sum", {}, done * 1.0), Sample(f"{e2e}_count", {}, done),
                Sample(f"{queue}_sum", {}, done * 0.1), Sample(f"{queue}_count", {}, done)]  # fmt: skip

    def reading(decode: int, prefill: int) -> dict[str, list]:
        return {"decode": histograms(decode), "prefill": histograms(prefill)}

    exports = iter([reading(16, 16), reading(16, 20), reading(32, 24), reading(32, 32)])
    monkeypatch.setattr(sweep_bench, "_role_samples", lambda _ctx: next(exports))
    monkeypatch.setattr(sweep_bench, "SETTLE_POLL_S", 0.0)
    monkeypatch.setattr(sweep_bench, "EXPORT_S", 0.0)
    ctx = Context(argparse.Namespace(), {}, "http://127.0.0.1:9", None, MODEL, True, "", list, [], tmp_path, "r",
                  Clock(), "llm")  # fmt: skip
    means, counted = sweep_bench._engines_after(ctx, reading(0, 0), 32)
    assert counted == 32 and means["decode"]["queue"] == {"mean": 100.0, "count": 32}
    assert means["prefill"]["queue"]["count"] == 32, "prefill's last export is waited for"
    monkeypatch.setattr(sweep_bench, "_role_samples", lambda _ctx: reading(16, 16))  # never catches up
    monkeypatch.setattr(sweep_bench, "SETTLE_S", 0.05)
    means, counted = sweep_bench._engines_after(ctx, reading(0, 0), 32)
    assert counted == 16 and means["decode"]["queue"]["count"] == 16
    figures = {"engines": {"decode": means["decode"]}, "engines_held": {"requests": counted, "of": 32}}
    assert sweep_bench._where(figures) == (
        "decode: queue 100.0 ms; (the engines' histograms counted 16 requests for the point's 32)"
    )


def test_a_sweeps_first_point_holds_none_of_the_warm_up_requests(tmp_path, monkeypatch):
    """Under Ray each reading of the histograms shows what was finished by the reading before it (here): the sweep
    lets the warm-up's and the calibration's requests land before the first point's reading, so that point's figures
    count its own 8 requests, not the 10 before them."""
    import argparse

    from llmclient import core
    from measure import pd_hops
    from measure.kv_proof import Sample
    from rehearsal.checks import sweep_bench
    from rehearsal.context import Clock, Context

    e2e = pd_hops.ray_name("vllm:e2e_request_latency_seconds")
    state = {"finished": 0, "exported": 0}

    def role_metrics(_names) -> dict[str, list]:
        shown, state["exported"] = state["exported"], state["finished"]
        return {"decode": [Sample(f"{e2e}_sum", {}, shown * 1.0), Sample(f"{e2e}_count", {}, shown)]}

    async def load(_ctx, shape, _first, count):
        state["finished"] += count
        tokens = 12 + int(1.25 * shape["prompt_words"])
        return [core.RequestResult(ok=True, ttft=0.1, itls=[0.01], output_tokens=2, prompt_tokens=tokens)] * count, 1.0

    monkeypatch.setattr(sweep_bench, "load", load)
    monkeypatch.setattr(sweep_bench, "SETTLE_POLL_S", 0.0)
    args = argparse.Namespace(sweep_bench=tmp_path / "sweep.json", sweep_prompts=(50,), sweep_concurrency=(1,),
                              sweep_max_tokens=2)  # fmt: skip
    ctx = Context(args, {}, "http://127.0.0.1:9", None, MODEL, True, "", list, [], tmp_path, "r", Clock(), "llm")
    ctx.role_metrics = role_metrics
    sweep_bench.SWEEP_BENCH.run(ctx)
    (point,) = json.loads(args.sweep_bench.read_text())["points"]
    assert point["engines"]["decode"]["e2e"]["count"] == 8 and "engines_held" not in point


def test_every_openai_client_is_closed_inside_its_event_loop():
    """An AsyncOpenAI client left to the garbage collector after asyncio.run closed its loop prints "Event loop
    is closed" tracebacks: every client of llmclient.core.client is opened by `async with`, which closes it
    while its loop still runs."""
    root = ROOT
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True)
    opened = [
        f"{path}:{n}"
        for path in tracked.stdout.split()
        if (root / path).exists() and path != "llmclient/core.py"
        for n, line in enumerate((root / path).read_text().splitlines(), 1)
        if re.search(r"\bcore\.client\(|\bAsyncOpenAI\(", line) and not re.search(r"\basync with core\.client\(", line)
    ]
    assert opened == []


def test_bench_without_an_endpoint_is_one_line(tmp_path, capsys):
    """Nothing listens: the bench says so in one line before it starts AIPerf, and exits 1."""
    from ray_llm_eks.adapters.ports import free_port

    assert main(["bench", f"http://127.0.0.1:{free_port()}", "--out", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench FAILED: list models at http://127.0.0.1:"), err
    assert "Connection error" in err[0] and "Traceback" not in err[0]


def test_verify_waits_for_the_transfers_of_split_prompts_only_under_selective_pd():
    from llmclient import verify
    from measure import kv_proof

    shape = kv_proof.KvShape(512, 0, 256, hybrid=False)
    before = kv_proof.KvCounters(bytes_buckets={kv_proof.INF: 2}, decode_tokens={"local_compute": 10}, paths={})
    # A short prompt (25 tokens) served on decode: no transfer, its tokens computed there, counted local.
    now = kv_proof.KvCounters(
        bytes_buckets={kv_proof.INF: 2}, decode_tokens={"local_compute": 35}, paths={"local": 1.0}
    )
    assert verify.split([25, 3000], 28) == [3000] and verify.split([25], None) == [25]
    assert verify.settled(before, now, [25], shape, local_below=28)
    assert not verify.settled(before, now, [25], shape)  # without selective PD it waits for a transfer
    counted_later = kv_proof.KvCounters(bytes_buckets={kv_proof.INF: 2}, decode_tokens={"local_compute": 35})
    assert not verify.settled(before, counted_later, [25], shape, local_below=28)


def test_verify_reads_selective_pds_threshold_from_the_served_config():
    from llmclient import verify
    from ray_llm_eks.adapters import stack as stack_adapter
    from ray_llm_eks.domain.serving.serve_app import document_dict

    on = stack_adapter.load_settings(stack_adapter.stack_file("dev", ROOT, overrides={"ray-llm-eks:selectivePd": "28"}))
    off = stack_adapter.load_settings(stack_adapter.stack_file("dev", ROOT))
    assert verify.expectations(document_dict(on.serving.serve_document), None, None).local_below == 28
    assert verify.expectations(document_dict(off.serving.serve_document), None, None).local_below is None


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_short_prompts_window_opens_once_the_request_counts_hold_still(monkeypatch):
    """A prefill request of the long prompts that Ray exports late lands in the reading taken before the short
    prompts, not among them: the reading waits until the roles' request counts hold for the lag (here one poll)."""
    from llmclient import verify
    from measure.kv_proof import KvCounters

    exported = iter([{"prefill": count} for count in (2.0, 3.0, 4.0, 4.0, 5.0)])
    monkeypatch.setattr(verify, "read", lambda sources: KvCounters(requests=next(exported)))
    monkeypatch.setattr(verify, "time", FakeClock())
    assert verify.quiet(verify.Sources(metrics=list)).requests == {"prefill": 4.0}


def test_the_short_prompts_window_waits_out_a_cluster_export_longer_than_a_poll(monkeypatch):
    """Ray in a cluster exports every 10 s: a count that held over one 3 s poll may still be an export short, so the
    reading waits until the counts held for the source's lag."""
    from llmclient import verify
    from measure.kv_proof import KvCounters

    clock = FakeClock()
    exported = iter([{"prefill": c} for c in (2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0)])
    monkeypatch.setattr(verify, "time", clock)
    monkeypatch.setattr(verify, "read", lambda sources: KvCounters(requests=next(exported)))
    reading = verify.quiet(verify.Sources(metrics=list, lag=10.0))
    assert reading.requests == {"prefill": 4.0}
    assert clock.now == 24.0  # 4 seen at 12 s, held 12 s: the first poll past 10 s


def test_the_metrics_lag_is_the_stacks_export_plus_its_scrape_where_a_prometheus_is_read():
    from llmclient import verify

    def args(*argv: str):
        parser = argparse.ArgumentParser()
        verify.add_arguments(parser)
        return parser.parse_args(["--stack", "dev", *argv])

    from ray_llm_eks.domain.telemetry.observability import RAY_METRICS_EXPORT_S, SCRAPE_INTERVAL_S

    assert verify.metrics_lag(args("--metrics-url", "http://127.0.0.1:2")) == RAY_METRICS_EXPORT_S
    assert verify.metrics_lag(args("--prometheus", "http://127.0.0.1:3")) == RAY_METRICS_EXPORT_S + SCRAPE_INTERVAL_S
    assert verify.metrics_lag(args("--prometheus", "http://127.0.0.1:3", "--metrics-lag", "4")) == 4.0


def short_prompts(monkeypatch, prefill_at, lag: float = 10.0):
    """run_short on a fake clock; `prefill_at(now, sent)`: prefill's request count the metrics show then."""
    from llmclient import verify
    from measure.kv_proof import KvShape

    clock = FakeClock()
    sent: list[int] = []

    def reading(sources) -> kv_proof.KvCounters:
        return kv_proof.KvCounters(requests={"prefill": prefill_at(clock.now, sent), "decode": 3.0 + len(sent)},
                          paths={"local": len(sent)}, decode_tokens={"local_compute": sum(sent)})  # fmt: skip

    async def send_short(url, model, api_key, count):
        sent.extend([25] * count)
        return list(sent)

    monkeypatch.setattr(verify, "time", clock)
    monkeypatch.setattr(verify, "read", reading)
    monkeypatch.setattr(verify, "send_short", send_short)
    shape = KvShape(kv_bytes_per_token=1.0, state_bytes_per_sequence=0.0, block_size=16, hybrid=False)
    sources = verify.Sources(metrics=list, lag=lag)
    return verify.run_short("http://127.0.0.1:1", "m", None, shape, sources, 28, 3, say=lambda line: None)


def test_a_long_prompts_late_prefill_export_is_not_counted_among_the_short_prompts(monkeypatch):
    """The short prompts' window opens on a reading that held for the metrics' lag: the long prompts' last prefill
    request, exported 6 s late (past one 3 s poll, within a cluster's 10 s export), falls before it."""
    verdict = short_prompts(monkeypatch, lambda now, sent: 3.0 if now >= 6 else 2.0)
    assert verdict.failures == [], verdict.lines
    assert "prefill requests +0" in verdict.lines[0]


def test_a_prefill_request_during_the_short_prompts_is_caught_though_exported_late(monkeypatch):
    """After the short prompts the verdict waits the lag again, so a prefill request one of them made, exported 6 s
    after, still fails it."""
    sent_at: list[float] = []

    def prefill(now: float, sent: list[int]) -> float:
        if sent and not sent_at:
            sent_at.append(now)
        return 3.0 + (1.0 if sent_at and now >= sent_at[0] + 6 else 0.0)

    verdict = short_prompts(monkeypatch, prefill)
    assert verdict.failures == ["prefill handled 1 request(s) during 3 short prompt(s) (0 split)"], verdict.lines


def test_counts_that_never_hold_give_the_latest_reading_after_the_wait_and_at_least_one_lag(monkeypatch):
    from llmclient import verify

    clock = FakeClock()
    monkeypatch.setattr(verify, "time", clock)
    monkeypatch.setattr(verify, "read", lambda sources: kv_proof.KvCounters(requests={"prefill": clock.now}))
    got = verify.quiet(verify.Sources(metrics=list, wait=30.0, lag=40.0))
    assert clock.now >= 43.0 and got.requests == {"prefill": clock.now}


def test_a_metrics_lag_that_is_not_a_number_of_seconds_is_refused_in_one_line(capsys):
    from llmclient import verify

    parser = argparse.ArgumentParser(prog="verify")
    verify.add_arguments(parser)
    for flag in ("--metrics-lag", "--wait"):
        for bad in ("-1", "nan", "soon"):
            with pytest.raises(SystemExit):
                parser.parse_args(["--stack", "dev", flag, bad])
            assert f"argument {flag}: {bad!r} is not a number of seconds, 0 or more" in capsys.readouterr().err
