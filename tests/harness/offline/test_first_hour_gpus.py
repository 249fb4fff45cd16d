"""First-hour mistakes with multi-GPU nodes, through `make plan`'s entry point: a tensor-parallel size
vLLM refuses is one line naming the sizes that pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.harness.offline.test_first_hour import NS, edit_stack, plan_fails

TP = "tensor-parallel.yaml"


def edit_tp(root: Path, **engine_kwargs) -> None:
    path = root / "ray_llm_eks" / "serve_configs" / TP
    doc = yaml.safe_load(path.read_text())
    doc["applications"][0]["args"]["llm_configs"][0]["engine_kwargs"].update(engine_kwargs)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_tp_3_for_64_heads_is_one_line_on_either_4_gpu_type(project, capsys):
    edit_tp(project, tensor_parallel_size=3)
    err = plan_fails(project, capsys, "tp")
    assert "invalid config collocated engine_kwargs.tensor_parallel_size = 3:" in err
    assert "on g6.12xlarge (4 GPUs) tensor_parallel_size 4;" in err and "Would fit" not in err
    edit_stack(project, "tp", **{NS + "gpuPools": {"collocated": {"instanceType": "g6e.12xlarge"}}})
    err = plan_fails(project, capsys, "tp")
    assert "on g6e.12xlarge (4 GPUs) tensor_parallel_size 2 or 4;" in err


_OWN = {
    "parameters": 32_000_000_000,
    "weightDtype": "bfloat16",
    "kvLayers": 64,
    "kvHeads": 8,
    "headDim": 128,
    "stateMiBPerSequence": 0,
    "maxContext": 40960,
}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (_OWN, "invalid config ray-llm-eks:modelSpec.attentionHeads (not set): required with tensor_parallel_size 4"),
        (
            {**_OWN, "kvLayers": 16, "stateMiBPerSequence": 49.1, "linearLayers": 48, "attentionHeads": 64},
            "invalid config ray-llm-eks:modelSpec.linearKeyHeads (not set): required with tensor_parallel_size 4",
        ),
        (
            {**_OWN, "attentionHeads": 36, "kvHeads": 6},
            "invalid config collocated engine_kwargs.tensor_parallel_size = 4: a size vLLM 0.26.0 accepts for "
            "me/model: [1, 2, 3] by the heads, none of which fits g6.12xlarge (4 GPUs) in memory; vLLM refuses 4: "
            "num_key_value_heads 6 >= 4 must be a multiple of it",
        ),
    ],
)
def test_a_users_model_on_tensor_parallel_needs_heads_that_divide(project, capsys, spec, expected):
    edit_stack(project, "tp", **{NS + "modelId": "me/model", NS + "modelSpec": spec})
    assert expected in plan_fails(project, capsys, "tp")
