"""Rehearsal only (on PYTHONPATH of the rehearsal's Ray processes for hybrid models): hide AMX from
vLLM's CPU platform. vllm/platforms/cpu.py sets VLLM_SSM_CONV_STATE_LAYOUT=SD on CPUs with AMX tiles,
and NIXL's hybrid transfer refuses it ("3-read Mamba conv transfer requires DS"), while the stack
sets DS as the GPUs need. torch.cpu._is_amx_tile_supported is patched once vllm.platforms.cpu loads."""

import importlib.abc
import sys

_TARGET = "vllm.platforms.cpu"


class _HideAmx(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        import torch

        torch.cpu._is_amx_tile_supported = lambda: False
        return None  # the normal finders load the module, which now sees no AMX


sys.meta_path.insert(0, _HideAmx())
