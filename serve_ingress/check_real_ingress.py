"""The key check around Ray Serve LLM's real OpenAiIngress (Ray 2.58), routed by Ray's own
make_fastapi_ingress and serve.ingress: no key and a wrong key are refused, the right key is
served by OpenAiIngress.
Needs Ray Serve LLM importable (vLLM installed): run it with the serving rehearsal's venv,

    $(REHEARSAL_VENV)/bin/python serve_ingress/check_real_ingress.py

(`make ingress-check`). No model, no engine: the ingress answers /v1/models from its model cards."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as in the pods: flat modules on PYTHONPATH


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys"
        keys.write_text("sk-right-key\n")
        os.environ["RAY_LLM_EKS_API_KEYS_FILE"] = str(keys)
        from api_key_ingress import ApiKeyIngress
        from fastapi import FastAPI
        from fastapi.testclient import TestClient
        from ray.llm._internal.serve.core.configs.openai_api_models import ModelCard
        from ray.llm._internal.serve.core.ingress.ingress import make_fastapi_ingress
        from ray.serve._private.http_util import _walk_fastapi_routes

        card = ModelCard(id="Qwen/Qwen3.5-9B", object="model", owned_by="ray-llm-eks", permission=[], metadata={})
        ingress = ApiKeyIngress({card.id: object()}, {card.id: card})
        app = FastAPI()
        make_fastapi_ingress(ApiKeyIngress, app=app)  # Ray's routing and serve.ingress, as its builder runs them
        # A replica injects its instance as `self`; here that dependency is overridden with ours.
        route = next(r for r, _, _ in _walk_fastapi_routes(app) if getattr(r, "path", "") == "/v1/models")
        app.dependency_overrides[route.endpoint.__signature__.parameters["self"].default.dependency] = lambda: ingress
        client = TestClient(app)
        results = {
            "no key": client.get("/v1/models").status_code,
            "wrong key": client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"}).status_code,
            "no key, chat": client.post("/v1/chat/completions", json={"model": card.id, "messages": []}).status_code,
            "right key": client.get("/v1/models", headers={"Authorization": "Bearer sk-right-key"}).status_code,
        }
        served = client.get("/v1/models", headers={"Authorization": "Bearer sk-right-key"}).json()
    for case, status in results.items():
        print(f"{case:>14}: HTTP {status}")
    print(f"served models: {[m['id'] for m in served['data']]}")
    expected = {"no key": 401, "wrong key": 401, "no key, chat": 401, "right key": 200}
    return 0 if results == expected and served["data"][0]["id"] == card.id else 1


if __name__ == "__main__":
    sys.exit(main())
