"""Phases 3 and 4 of a rehearsal: submit the serve config to Ray's dashboard (Serve's REST API, as KubeRay
does), then wait until the application runs, failing fast on an engine error."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ray_llm_eks.domain.serving.serve_config import role_of
from rehearsal import verify
from rehearsal.context import Clock, RehearsalFailed
from rehearsal.logs import fatal_logged
from rehearsal.verify import http_json

POLL = 2.0  # seconds between status polls


def deploy(dashboard: str, document: dict) -> None:
    http_json("PUT", f"{dashboard}/api/serve/applications/", document, timeout=60)


def wait_ready(
    dashboard: str,
    app: str,
    clock: Clock,
    log_dir: Path | Sequence[Path],
    cap: float,
    replica_ready: dict[str, float] | None = None,
    on_healthy: Callable[[str], None] | None = None,
    on_replica: Callable[[str, int], None] | None = None,
) -> dict[str, float]:
    """Poll Serve until the app runs; returns role -> seconds to healthy, and fills `replica_ready` (replica
    id -> seconds to RUNNING). `on_healthy(role)` runs once per role as it turns HEALTHY (the GPU layout
    starts decode's Ray node then), `on_replica(role, n)` as its n-th replica turns RUNNING (the GPU layout
    starts the node of the role's next replica then). Fails fast on an engine error."""
    healthy: dict[str, float] = {}
    replica_ready = {} if replica_ready is None else replica_ready
    running: dict[str, int] = {}
    seen: dict[str, str] = {}
    end = time.monotonic() + cap
    while True:
        application = verify.application(dashboard, app)
        for name, dep in (application.get("deployments") or {}).items():
            state = dep.get("status", "?")
            if seen.get(name) != state:
                seen[name] = state
                t = clock.mark(f"deployment {name}: {state}")
                role = role_of(name)
                if state == "HEALTHY" and role is not None and role not in healthy:
                    healthy[role] = t
                    if on_healthy is not None:
                        on_healthy(role)
            for replica in dep.get("replicas") or []:
                if replica.get("state") == "RUNNING" and replica["replica_id"] not in replica_ready:
                    rid = replica["replica_id"]
                    replica_ready[rid] = clock.mark(f"replica {name} {rid}: RUNNING")
                    if (role := role_of(name)) is not None:
                        running[role] = running.get(role, 0) + 1
                        if on_replica is not None:
                            on_replica(role, running[role])
        clock.now()
        app_state = application.get("status")
        if app_state == "RUNNING":
            return healthy
        if app_state in {"DEPLOY_FAILED", "UNHEALTHY"}:
            raise RehearsalFailed(f"application {app}: {app_state}: {application.get('message', '')[:2000]}")
        if fatal_logged(log_dir):
            raise RehearsalFailed("a replica failed to start (its engine's error is below)")
        if time.monotonic() > end:
            raise RehearsalFailed(f"not ready within {cap:g} s (application status {app_state})")
        time.sleep(POLL)
