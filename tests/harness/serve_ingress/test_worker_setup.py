"""The serving application's worker setup hook (ray_llm_eks/serve_ingress/worker_setup.py): it imports NIXL through
vLLM's accessor before Serve's replica logger exists, and never fails the worker. The end-to-end proof
is the rehearsal's head fault with GCS fault tolerance on (engines keep their PIDs)."""

from __future__ import annotations

import logging
import logging.config
import logging.handlers
import sys
import types

import pytest

from ray_llm_eks.adapters import stack
from ray_llm_eks.domain.render.ray_service import served_document
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import document_dict, parse_document
from ray_llm_eks.serve_ingress import worker_setup
from tests.conftest import ROOT


def _fake_vllm(monkeypatch, on_access):
    """vllm.distributed.nixl_utils as a module whose NixlWrapper attribute runs `on_access`."""
    nixl_utils = types.ModuleType("vllm.distributed.nixl_utils")
    nixl_utils.__getattr__ = lambda name: on_access(name)
    distributed = types.ModuleType("vllm.distributed")
    distributed.nixl_utils = nixl_utils
    vllm = types.ModuleType("vllm")
    vllm.distributed = distributed
    for name, module in {
        "vllm": vllm,
        "vllm.distributed": distributed,
        "vllm.distributed.nixl_utils": nixl_utils,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_the_hook_loads_nixl_so_a_later_handler_survives_its_logging_setup(monkeypatch):
    configured = []

    def import_nixl(name):
        if not configured:  # NIXL configures logging once per process, on its first import
            logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
            configured.append(name)
        return object()

    _fake_vllm(monkeypatch, import_nixl)
    worker_setup.configure_logging_first()
    assert configured == ["NixlWrapper"]
    serve_handler = logging.handlers.MemoryHandler(1, target=logging.StreamHandler())
    import_nixl("NixlWrapper")  # the engine's own import, later: nothing is configured again
    assert serve_handler.target is not None


def test_a_failing_import_is_logged_and_does_not_end_the_worker(monkeypatch, caplog):
    def broken(name):
        raise OSError("libucs.so: cannot open shared object file")

    _fake_vllm(monkeypatch, broken)
    with caplog.at_level(logging.WARNING):
        worker_setup.configure_logging_first()
    assert "NIXL not imported before Serve's logger" in caplog.text and "libucs.so" in caplog.text


def test_without_vllm_the_hook_does_nothing(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with caplog.at_level(logging.WARNING):
        worker_setup.configure_logging_first()
    assert "NIXL not imported" in caplog.text


@pytest.mark.parametrize("name", ["dev", "baseline"])
def test_an_engines_own_ray_init_finds_the_hook_field_and_env_var_in_agreement(name):
    """vLLM's Ray executor calls ray.init in the engine process, which inherits the replica's env var, with
    the runtime_env Ray Serve LLM gives the replica: its own no-op hook, overridden by the LLM config's. Ray
    refuses a field that names another hook than the env var (an engine that cannot start)."""
    from ray._private.runtime_env import setup_hook

    document = document_dict(served_document(stack.load_settings(stack.stack_file(name, ROOT))))
    for config in map(to_dict, parse_document(document, name).roles.values()):
        replica_env = {"worker_process_setup_hook": "ray.llm._internal.serve._worker_process_setup_hook"}
        replica_env |= config["runtime_env"]  # the merge order of llm_server.LLMServer.get_deployment_options
        inherited = config["runtime_env"]["env_vars"][setup_hook.ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR]
        setup_hook._check_setup_hook_consistency(inherited, replica_env["worker_process_setup_hook"], worker=None)
