"""A small read/write client for the Kubernetes API from a kubeconfig, standard library only.

Used by the existing-cluster checks (what the cluster offers, read at deploy time) and by the
e2e harness. It understands what EKS and local kubeconfigs use: the current context's server,
CA (data or file), client certificate and key (data or file), a bearer token, or an `exec`
credential plugin (`aws eks get-token` prints an ExecCredential with status.token).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from typing import Any

import yaml

from ray_llm_eks.adapters import environment
from ray_llm_eks.domain.core.errors import ConfigError


class KubeError(RuntimeError):
    """An API call that failed; `status` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


class KubeUnreachable(KubeError):
    """The API server was not reached, or the kubeconfig's credential plugin failed: nothing about the cluster
    is known (an offline plan defers what it would have checked)."""

    def __init__(self, message: str):
        super().__init__(0, message)


def _named(items: list[dict], name: str, what: str) -> dict:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise KubeError(0, f"kubeconfig has no {what} named {name!r}")


def _material(section: dict, key: str, base_dir: str) -> bytes | None:
    """`<key>-data` (base64) or `<key>` (a file path, relative to the kubeconfig's folder)."""
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        with open(os.path.join(base_dir, os.path.expanduser(section[key])), "rb") as f:
            return f.read()
    return None


@dataclass
class KubeClient:
    server: str
    ssl_context: ssl.SSLContext
    token: str | None = None
    timeout: float = 30.0

    @classmethod
    def from_kubeconfig(cls, text: str, base_dir: str = ".", context: str | None = None) -> KubeClient:
        config = yaml.safe_load(text) or {}
        ctx = _named(config.get("contexts", []), context or config.get("current-context", ""), "context")
        cluster = _named(config.get("clusters", []), ctx.get("cluster", ""), "cluster")
        user = _named(config.get("users", []), ctx.get("user", ""), "user") if ctx.get("user") else {}
        server = cluster.get("server")
        if not server:
            raise KubeError(0, "kubeconfig cluster has no server")
        if cluster.get("insecure-skip-tls-verify"):
            context_ = ssl._create_unverified_context()  # the kubeconfig asked for it
        else:
            context_ = ssl.create_default_context()
            ca = _material(cluster, "certificate-authority", base_dir)
            if ca:
                context_.load_verify_locations(cadata=ca.decode())
        cert, key = _material(user, "client-certificate", base_dir), _material(user, "client-key", base_dir)
        if cert and key:
            # ssl loads a client certificate from files only: write them to a private temporary folder.
            with tempfile.TemporaryDirectory() as tmp:
                cert_path, key_path = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
                for path, data in ((cert_path, cert), (key_path, key)):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                context_.load_cert_chain(cert_path, key_path)
        token = user.get("token")
        if not token and user.get("exec"):
            token = _exec_token(user["exec"])
        return cls(server=server.rstrip("/"), ssl_context=context_, token=token)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        return self.request_warned(method, path, body, content_type)[0]

    def request_warned(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        extra_headers: dict[str, str] | None = None,
    ) -> tuple[Any, list[str]]:
        """`request`, with the warnings the API server sent beside the answer (its `Warning` headers: admission
        plugins such as PodSecurity report there what they let through)."""
        url = urllib.parse.urlsplit(self.server)
        conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        kwargs = {"context": self.ssl_context} if url.scheme == "https" else {}
        conn = conn_cls(url.hostname, url.port, timeout=self.timeout, **kwargs)
        headers = {"Accept": "application/json", **(extra_headers or {})}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, url.path.rstrip("/") + path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            warnings = [warning_text(h) for h in resp.msg.get_all("Warning") or []]
        except OSError as e:
            raise KubeUnreachable(f"{method} {self.server}{path}: {e}") from e
        finally:
            conn.close()
        if resp.status >= 400:
            try:
                message = json.loads(data).get("message", data.decode())
            except ValueError:
                message = data.decode(errors="replace")
            raise KubeError(resp.status, f"{method} {path}: {resp.status} {message}")
        if not data:
            return None, warnings
        try:
            return json.loads(data), warnings
        except ValueError:
            return data.decode(errors="replace"), warnings  # plain-text endpoints (/readyz, /healthz)

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except KubeError as e:
            if e.status == 404:
                return None
            raise


def warning_text(header: str) -> str:
    """The text of one `Warning` header as the API server writes it (RFC 7234: `299 - "text"`, with `"` and
    `\\` escaped by a backslash and nothing else, k8s.io/apimachinery util/net NewWarningHeader); the header
    itself when it is not of that form. http.client hands headers over as Latin-1: the text is UTF-8."""
    header = header.encode("latin-1", "replace").decode("utf-8", "replace")
    parts = header.split(" ", 2)
    if len(parts) == 3 and parts[0].isdigit() and len(parts[2]) >= 2 and parts[2][0] == parts[2][-1] == '"':
        return re.sub(r"\\(.)", r"\1", parts[2][1:-1])
    return header


def _exec_token(spec: dict) -> str:
    env = dict(os.environ, **{e["name"]: e["value"] for e in spec.get("env") or []})
    try:
        out = subprocess.run(
            [spec["command"], *(spec.get("args") or [])], env=env, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KubeUnreachable(f"kubeconfig exec {spec['command']} failed: {e}") from e
    if out.returncode != 0:
        raise KubeUnreachable(f"kubeconfig exec {spec['command']} failed: {out.stderr.strip()[:300]}")
    return json.loads(out.stdout)["status"]["token"]


def environment_kubeconfig() -> tuple[str, str]:
    """(text, folder) of the kubeconfig the environment names (ray_llm_eks.adapters.environment.kubeconfig_path)."""
    path = environment.kubeconfig_path()
    if not path.is_file():
        raise ConfigError(
            "kubeconfig",
            None,
            f"set it (pulumi config set --secret kubeconfig < FILE) or KUBECONFIG; {path} is missing",
        )
    return path.read_text(encoding="utf-8"), str(path.parent)
