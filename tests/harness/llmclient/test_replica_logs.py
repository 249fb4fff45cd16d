"""Where `make verify` reads the engines' NIXL backend (llmclient/metrics.py replica_logs): from the log files on this
machine when it has them (a rehearsal: no API, no timeout), else through Ray's log API with retries; a log that
cannot be read fails naming it, and never reads as an engine that logged nothing."""

from __future__ import annotations

import json

import pytest

from llmclient import metrics, verify

STATUS = {"applications": {"llm": {"deployments": {
    "PDDecodeServer:llm": {"replicas": [{"replica_id": "d1", "actor_id": "a-d1", "worker_id": "w1", "pid": 41}]},
    "PDPrefillServer:llm": {"replicas": [{"replica_id": "p1", "actor_id": "a-p1", "worker_id": "w2", "pid": 42}]},
}}}}  # fmt: skip


def api(files: dict[str, str], failures: dict[str, int] | None = None):
    """A dashboard answering the Serve status and, by actor id and suffix, `files`; `failures`: how many times
    each query fails first."""
    left = dict(failures or {})

    def fetch(path: str) -> str:
        if path.startswith("/api/serve/applications/"):
            return json.dumps(STATUS)
        key = next(k for k in files if k in path)
        if left.get(key, 0) > 0:
            left[key] -= 1
            raise metrics.MetricsError(f"GET {path}: timed out")
        return files[key]

    return fetch


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(metrics.time, "sleep", lambda seconds: None)


def test_the_files_here_are_read_by_each_replicas_worker_and_pid(tmp_path):
    (tmp_path / "worker-w1-01000000-41.err").write_text("(Worker pid=77) NIXL INFO Backend UCX was instantiated\n")
    (tmp_path / "worker-w2-01000000-42.err").write_text("Backend LIBFABRIC was instantiated\n")
    (tmp_path / "worker-w9-01000000-99.err").write_text("Backend GDS was instantiated\n")  # another process
    fetch = api({})  # the log API is not asked: it would fail
    logs = metrics.replica_logs(fetch, "llm", [tmp_path])
    assert verify.backends(logs) == {"UCX"} and verify.backends(logs, "prefill") == {"LIBFABRIC"}


def test_the_api_is_asked_again_when_a_read_times_out():
    files = {"a-d1&suffix=out": "", "a-d1&suffix=err": "Backend UCX was instantiated", "a-p1": ""}
    logs = metrics.replica_logs(api(files, {"a-d1&suffix=err": 2}), "llm")
    assert verify.backends(logs) == {"UCX"}


def test_a_log_that_cannot_be_read_fails_naming_it_instead_of_reading_as_none_logged():
    files = {"a-d1&suffix=out": "", "a-d1&suffix=err": "Backend UCX was instantiated", "a-p1": ""}
    with pytest.raises(metrics.MetricsError, match=r"the err log of replica d1 not read: GET .*timed out"):
        metrics.replica_logs(api(files, {"a-d1&suffix=err": 3}), "llm")
