"""The plain-vLLM yardstick's engines (rehearsal/plain_vllm.py): each role's engine arguments as `vllm serve` flags
that vLLM's own parser reads back to the same values (in the rehearsal venv, where vLLM is), the environment each
engine gets, and the order they start in on one GPU."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import parse_document
from rehearsal import gpu as gpu_rules
from rehearsal import plain_vllm
from rehearsal.prepare import deployed_spec
from tests.harness.rehearsal.test_rehearsal_isa import REHEARSAL_VENV


@pytest.fixture(scope="module")
def dev_doc() -> dict:
    return yaml.safe_load(deployed_spec("dev")["serveConfigV2"])


def test_flags_follow_vllms_argument_conventions():
    flags = plain_vllm.serve_flags({"max_model_len": 4096, "enforce_eager": True, "enable_prefix_caching": False,
                                    "kv_transfer_config": {"kv_role": "kv_consumer"}, "block_size": None})  # fmt: skip
    assert flags == ["--max-model-len", "4096", "--enforce-eager", "--no-enable-prefix-caching",
                     "--kv-transfer-config", '{"kv_role":"kv_consumer"}']  # fmt: skip


def test_one_gpu_engines_start_one_after_the_other_each_with_its_side_channel(dev_doc):
    nodes, _ = gpu_rules.layout(gpu_rules.role_needs(dev_doc), gpu_count=1)
    env = {"PATH": "/usr/bin", "PYTHONPATH": "/repo"}
    prefill, decode = plain_vllm.engines(dev_doc, nodes, env, python="py")
    assert (prefill.after, decode.after) == (None, "prefill")
    ports = [e.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for e in (prefill, decode)]
    assert ports == ["20000", "22000"]
    assert prefill.env["CUDA_VISIBLE_DEVICES"] == decode.env["CUDA_VISIBLE_DEVICES"] == "0"
    # The role's runtime_env (the hybrid model's conv-state layout) but not Ray's hook or the pod's PYTHONPATH.
    assert decode.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS" and decode.env["PYTHONPATH"] == "/repo"
    assert "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR" not in decode.env
    assert decode.env["NCCL_NVLS_ENABLE"] == "0"
    assert decode.command[:4] == ("py", "-m", "vllm.entrypoints.openai.api_server", "--model")
    assert decode.command[decode.command.index("--served-model-name") + 1] == "Qwen/Qwen3.5-9B"
    assert prefill.port != decode.port


def test_collocated_replicas_on_the_cpu_are_one_engine_each_in_turn():
    pools = '{"collocated": {"instanceType": "g6.8xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 2}}'
    spec = deployed_spec("baseline", ['replicas={"collocated": 2}', f"gpuPools={pools}"])
    doc = yaml.safe_load(spec["serveConfigV2"])
    nodes = plain_vllm.cpu_layout(doc)
    assert [(n.node_name, n.after_role, n.devices) for n in nodes] == [
        ("collocated-1", None, ()), ("collocated-2", "collocated-1", ())
    ]  # fmt: skip
    first, second = plain_vllm.engines(doc, nodes, {}, python="py")
    assert second.after == "collocated-1" and "CUDA_VISIBLE_DEVICES" not in first.env
    assert plain_vllm.mode_of(doc) == "collocated"


PARSE = """
import json, sys
from vllm.entrypoints.openai.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
for argv in json.loads(sys.argv[1]):
    args = parser.parse_args(argv)
    print(json.dumps(vars(args), default=lambda o: {k: v for k, v in vars(o).items() if not k.startswith("_")}
                     if hasattr(o, "__dict__") else str(o)))
"""


@pytest.mark.skipif(
    not (REHEARSAL_VENV / ".installed").exists(), reason=f"no rehearsal venv at {REHEARSAL_VENV} (make rehearsal-venv)"
)
def test_vllms_own_parser_reads_every_role_of_the_dev_stack_back(dev_doc):
    roles = {role: to_dict(config) for role, config in parse_document(dev_doc, "test").roles.items()}
    argvs = [["--model", "m", *plain_vllm.serve_flags(c["engine_kwargs"])] for c in roles.values()]
    done = subprocess.run([str(REHEARSAL_VENV / "bin" / "python"), "-c", PARSE, json.dumps(argvs)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
    parsed_all = [json.loads(line) for line in done.stdout.strip().splitlines()[-len(roles) :]]
    for (role, config), parsed in zip(roles.items(), parsed_all, strict=True):
        for key, value in config["engine_kwargs"].items():
            got = parsed[key]
            if isinstance(value, dict):  # vLLM parses it into its own config class: the fields the document set
                got = {k: got.get(k) for k in value}
            assert got == value, f"{role}: {key} = {got!r}, the document says {value!r}"
