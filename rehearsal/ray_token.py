"""Ray's token authentication on the rehearsal's Ray, as the stack's RayService runs it (KubeRay authOptions:
ray_llm_eks/domain/security/ray_auth.py): every Ray process gets RAY_AUTH_MODE=token and this run's token, and
the rehearsal's own calls to the dashboard (deploy, status, logs) send it."""

from __future__ import annotations

import secrets

from ray_llm_eks.domain.security.ray_auth import TOKEN_ENV

TOKEN = secrets.token_hex(24)  # this rehearsal process's, for every Ray node it starts
ENV = {"RAY_AUTH_MODE": "token", TOKEN_ENV: TOKEN}
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
