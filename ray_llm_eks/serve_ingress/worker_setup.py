"""Ray's worker setup hook for the serving application (ray_llm_eks/domain/serving/api_keys.py names it in the app's
runtime_env): runs in each of its worker processes before Serve sets up a replica's logger.

A library that configures logging through a non-incremental `logging.config.dictConfig` closes every
handler that exists at that moment (CPython 3.11 logging/config.py `_clearExistingHandlers`), and a
closed `MemoryHandler` drops its target. NIXL does it when first imported (nixl-cu13 1.3.1
nixl_cu13/logging.py `setup_logging`), and vLLM's NIXL connector first imports it while the engine
starts, after Serve has put a MemoryHandler in front of the replica's log file. A Serve controller
restarted with the Ray head then fails to recover the replica (Ray 2.58 `ReplicaActor.is_allocated`
-> serve/_private/logging_utils.py `get_component_logger_file_path` reads `handler.target.baseFilename`)
and replaces it: the engine loads its model again although GCS fault tolerance kept the worker.
Importing NIXL here, before Serve's handler exists, leaves that handler alone."""

import logging


def configure_logging_first() -> None:
    """Import NIXL the way vLLM does, so that vLLM's setting of UCX_RCACHE_MAX_UNRELEASED still comes
    before UCX loads (vLLM 0.26 vllm/distributed/nixl_utils.py `_load_nixl_attr`)."""
    try:
        from vllm.distributed import nixl_utils

        nixl_utils.NixlWrapper  # noqa: B018 - the module's __getattr__ imports NIXL (None where missing)
    except Exception:
        # A failed hook makes Ray end the worker; without this import only a head restart costs more.
        logging.getLogger(__name__).warning("NIXL not imported before Serve's logger", exc_info=True)
