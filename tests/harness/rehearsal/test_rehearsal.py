"""The serving rehearsal's pure parts: what it changes in a stack's rendered serve config (only what
cannot exist on a CPU), the mistakes it can inject, and how it finds the engine's own error in Ray's
logs. The rehearsal itself runs real engines: `make rehearse STACK=dev|baseline` (CI runs both)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from ray_llm_eks.adapters import stack as stack_adapter
from ray_llm_eks.domain.render.ray_service import ray_service_spec, served_document
from ray_llm_eks.domain.serving import api_keys
from ray_llm_eks.domain.serving.fields import to_dict
from ray_llm_eks.domain.serving.serve_app import document_dict, parse_document
from rehearsal import substitute
from rehearsal.context import Clock, Context, RehearsalFailed
from rehearsal.logs import root_errors
from rehearsal.prepare import (
    ROOT,
    deployed_spec,
    key_check_here,
    key_checked,
    new_key,
    nixl_pinned_core,
    prepare,
    rendered_document,
    stack_overrides,
    stand_in_family,
)
from rehearsal.ray_cluster import start_ray


def rendered(stack: str) -> dict:
    return rendered_document(stack)


def role_configs(doc: dict) -> dict[str, dict]:
    """Each role's LLM config of a document, as plain data."""
    return {role: to_dict(config) for role, config in parse_document(doc, "test").roles.items()}


@pytest.mark.parametrize("stack", ["dev", "baseline"])
def test_the_rehearsal_serves_the_keyed_document_the_rayservice_gets(stack):
    settings = stack_adapter.load_settings(stack_adapter.stack_file(stack, ROOT))
    doc = rendered(stack)
    assert (
        doc == yaml.safe_load(ray_service_spec(settings)["serveConfigV2"]) == document_dict(served_document(settings))
    )
    assert key_checked(doc) and not key_checked(document_dict(settings.serving.serve_document))


def test_the_pods_mounts_become_local_paths_each_printed(tmp_path):
    spec = deployed_spec("dev")
    local = substitute.for_cpu(rendered("dev"), "/m", "qwen3_next")
    here, lines = key_check_here(local, spec, tmp_path / "keys")
    env = here.document["applications"][0]["runtime_env"]["env_vars"]
    assert env == {
        "PYTHONPATH": f"{ROOT / 'ray_llm_eks' / 'serve_ingress'}:${{PYTHONPATH}}",
        "RAY_LLM_EKS_API_KEYS_FILE": f"{tmp_path}/keys/keys",
        "RAY_LLM_EKS_MAX_REQUEST_BYTES": "8388608",  # the stack's limit, kept as it is in the pods
        "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "worker_setup.configure_logging_first",
    }
    configmap = (
        f"'/opt/ray-llm-eks/python:${{PYTHONPATH}}' -> '{ROOT / 'ray_llm_eks' / 'serve_ingress'}:${{PYTHONPATH}}' "
        "(/opt/ray-llm-eks/python is the ConfigMap api-key-ingress mount: here the repository's "
        "ray_llm_eks/serve_ingress/, "
        "the files that ConfigMap carries)"
    )
    assert lines == [
        f"applications[llm].runtime_env.env_vars.PYTHONPATH: {configmap}",
        f"applications[llm].runtime_env.env_vars.RAY_LLM_EKS_API_KEYS_FILE: '/etc/ray-llm-eks/api-keys/keys' -> "
        f"'{tmp_path}/keys/keys' (/etc/ray-llm-eks/api-keys is the Secret api-keys mount: here a file with one random "
        "key made for this run, readable by this user only)",
        # each engine replica gets its LLM config's env_vars, which carry the shipped code's path too
        f"applications[llm].args.prefill_config.runtime_env.env_vars.PYTHONPATH: {configmap}",
        f"applications[llm].args.decode_config.runtime_env.env_vars.PYTHONPATH: {configmap}",
    ]
    args_here = json.dumps(here.document["applications"][0]["args"]).replace(
        str(api_keys.SOURCES_DIR), api_keys.MODULE_DIR
    )
    assert json.loads(args_here) == local.document["applications"][0]["args"]  # the rest as it was
    # Only whole path components name a mount; a document without the key check is left as it is.
    moved = substitute.moved_paths(
        {"applications": [{"name": "a", "runtime_env": {"env_vars": {"Y": "/opt/ray-llm-eks/pythonic"}}}]},
        {"applications": [{"name": "a", "runtime_env": {"env_vars": {"Y": "/x"}}}]},
        substitute.pod_mounts(spec),
        {},
    )
    assert moved == ["applications[a].runtime_env.env_vars.Y: '/opt/ray-llm-eks/pythonic' -> '/x' (no pod mount)"]
    unkeyed_settings = stack_adapter.load_settings(stack_adapter.stack_file("dev", ROOT))
    unkeyed = substitute.for_cpu(document_dict(unkeyed_settings.serving.serve_document), "/m", "qwen3_next")
    assert key_check_here(unkeyed, spec, tmp_path) == (unkeyed, [])


def test_each_run_gets_a_new_key_only_its_user_reads(tmp_path):
    first = new_key(tmp_path)
    path = tmp_path / api_keys.KEYS_FILE
    assert path.read_text() == f"{first}\n" and (path.stat().st_mode & 0o777) == 0o600
    assert len(first) >= api_keys.MIN_KEY_LENGTH
    second = new_key(tmp_path)
    assert second != first and path.read_text() == f"{second}\n"


@pytest.mark.parametrize("stack", ["dev", "baseline"])
def test_only_what_cannot_exist_on_a_cpu_changes(stack):
    doc = rendered(stack)
    local = substitute.for_cpu(doc, "/models/stand-in", stand_in_family(doc), port=18000, nixl_core=3)
    assert local.family == "qwen3_next" and local.hybrid  # Qwen3.5: Gated DeltaNet + full attention
    assert local.pd == (stack == "dev")
    before, after = role_configs(doc), role_configs(local.document)
    assert before.keys() == after.keys()
    for role, old in before.items():
        new = copy.deepcopy(after[role])
        assert new["model_loading_config"] == {**old["model_loading_config"], "model_source": "/models/stand-in"}
        assert "accelerator_type" not in new
        assert new["placement_group_config"]["bundle_per_worker"] == {"CPU": 1}
        engine, old_engine = new["engine_kwargs"], copy.deepcopy(old["engine_kwargs"])
        assert engine.pop("gpu_memory_utilization") == substitute.CPU_MEMORY_FRACTION
        assert engine.pop("enforce_eager") is True
        assert engine.pop("mamba_ssm_cache_dtype") == "float32"
        old_engine.pop("gpu_memory_utilization")
        if "kv_transfer_config" in old_engine:
            kv, old_kv = engine.pop("kv_transfer_config"), old_engine.pop("kv_transfer_config")
            assert kv["kv_connector_extra_config"]["backends"] == ["UCX"]
            assert kv["kv_buffer_device"] == "cpu"
            assert {k: v for k, v in kv.items() if k not in {"kv_connector_extra_config", "kv_buffer_device"}} == {
                k: v for k, v in old_kv.items() if k not in {"kv_connector_extra_config", "kv_buffer_device"}
            }
        assert engine == old_engine  # every other engine arg as rendered
        assert new.get("deployment_config") == old.get("deployment_config")
        env = dict(new.get("runtime_env", {}).get("env_vars", {}))
        old_env = old.get("runtime_env", {}).get("env_vars", {})
        if stack == "dev":  # one OpenMP thread per PD engine, on the core vLLM's NixlConnector pins it to
            assert env.pop(substitute.OMP_BIND) == "3"
        assert env == old_env
    app, old_app = local.document["applications"][0], doc["applications"][0]
    assert app["import_path"] == old_app["import_path"] and app["route_prefix"] == old_app["route_prefix"]
    assert local.document["http_options"] == {"host": "127.0.0.1", "port": 18000}
    assert len(local.substitutions) >= 5  # each change is printed


def test_each_family_has_a_stand_in_of_its_layer_kinds():
    assert substitute.stand_in("qwen3_5", True) == "qwen3_next"
    assert substitute.stand_in("llama3", False) == "llama"
    assert substitute.stand_in("qwen3", False) == "qwen3"
    assert substitute.stand_in(None, True) == "qwen3_next"  # a modelSpec of the user's with linear attention
    assert substitute.stand_in(None, False) == "llama"


@pytest.mark.parametrize("mutation", sorted(substitute.MUTATIONS))
def test_mutations_change_the_pd_config(mutation):
    doc = substitute.for_cpu(rendered("dev"), "/m", "qwen3_next").document
    before = copy.deepcopy(doc)
    assert mutation in substitute.mutate(doc, mutation)
    assert doc != before


def test_swapped_roles_are_named_though_no_engine_reports_them():
    doc = substitute.for_cpu(rendered("dev"), "/m", "qwen3_next").document
    assert substitute.role_mistakes(doc) == []
    substitute.mutate(doc, "swap-roles")
    prefill, decode = substitute.role_mistakes(doc)
    assert prefill.startswith("prefill.engine_kwargs.kv_transfer_config.kv_role = 'kv_consumer': the prefill side")
    assert decode.startswith("decode.engine_kwargs.kv_transfer_config.kv_role = 'kv_producer': the decode side")
    assert substitute.role_mistakes(substitute.for_cpu(rendered("baseline"), "/m", "qwen3_next").document) == []


def test_mutations_need_a_pd_app():
    doc = substitute.for_cpu(rendered("baseline"), "/m", "qwen3_next").document
    with pytest.raises(ValueError, match="prefill/decode"):
        substitute.mutate(doc, "swap-roles")


def test_the_engine_error_is_found_under_its_wrappers(tmp_path):
    replica = tmp_path / "worker-1-2-3.out"
    replica.write_text(
        "(Worker pid=24489) INFO 11-30 14:23:51 [cpu_model_runner.py:128] Starting to load model /m...\n"
        "(Worker pid=24489) ERROR 11-30 14:23:51 [multiproc_executor.py:901] WorkerProc failed to start.\n"
        "(Worker pid=24489) ERROR 11-30 14:23:51 [multiproc_executor.py:901] Traceback (most recent call last):\n"
        '(Worker pid=24489) ERROR 11-30 14:23:51 [multiproc_executor.py:901]   File "x.py", line 1, in f\n'
        "(Worker pid=24489) ERROR 11-30 14:23:51 [multiproc_executor.py:901]     raise ValueError('kv_role')\n"
        "(Worker pid=24489) ERROR 11-30 14:23:51 [multiproc_executor.py:901] ValueError: kv_role is wrong\n"
    )
    controller = tmp_path / "worker-9.err"
    controller.write_text(
        "Traceback (most recent call last):\n"
        '  File "y.py", line 2, in g\n'
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    errors = root_errors(tmp_path)
    assert errors[0].startswith("ValueError: kv_role is wrong")
    assert "Engine core initialization failed" in errors[1]


def test_an_engine_error_comes_before_ray_daemons_and_timeouts(tmp_path):
    (tmp_path / "dashboard.log").write_text("Traceback (most recent call last):\nOSError: [Errno 98] Address in use\n")
    (tmp_path / "worker-1.err").write_text(
        "Traceback (most recent call last):\nray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.\n"
    )
    (tmp_path / "worker-2.err").write_text(
        "(Worker pid=7) ERROR 11-30 17:56:32 [base_worker.py:832] NIXL transfer failure: handshake_failed\n"
        "(Worker pid=7) Traceback (most recent call last):\n"
        "(Worker pid=7) AssertionError: HMA does not support different remote block size yet\n"
    )
    errors = root_errors(tmp_path)
    assert errors[0].startswith("AssertionError: HMA does not support different remote block size yet")
    assert errors[1].startswith("OSError: [Errno 98]") and "GetTimeoutError" in errors[2]


def test_the_reason_on_the_lines_after_the_exception_is_kept(tmp_path):
    (tmp_path / "worker-5.err").write_text(
        "Traceback (most recent call last):\n"
        '  File "llm_config.py", line 9, in get_engine_config\n'
        "RuntimeError: Failed to create vLLM engine config: 1 validation error for VllmConfig\n"
        "  Value error, Unsupported connector type: NixlConector [type=value_error]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n"
    )
    (error,) = root_errors(tmp_path)
    assert "1 validation error for VllmConfig | Value error, Unsupported connector type: NixlConector" in error


def test_the_core_nixl_pins_to_is_the_last_physical_core(tmp_path):
    # Hyper-threads 0/4, 1/5, 2/6, 3/7: vLLM names a core by its lowest sibling, so the last core is 3, not 7.
    for cpu in range(8):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(f"{cpu % 4},{cpu % 4 + 4}\n")
    assert nixl_pinned_core(tmp_path) == 3
    (tmp_path / "cpu8" / "topology").mkdir(parents=True)
    (tmp_path / "cpu8" / "topology" / "thread_siblings_list").write_text("8-9\n")
    assert nixl_pinned_core(tmp_path) == 8


def test_a_failed_ray_start_is_retried_then_named_in_one_line(tmp_path):
    clock = Clock()
    fail = [sys.executable, "-c", "import sys; print('noise', file=sys.stderr); sys.exit('Exception: node timed out')"]
    with pytest.raises(RehearsalFailed, match=r"ray start failed 2 times; last: Exception: node timed out"):
        start_ray(lambda: fail, {}, "no-such-run", clock)
    assert [what for _, what in clock.events] == [
        "ray start failed (attempt 1 of 2): Exception: node timed out",
        "ray start failed (attempt 2 of 2): Exception: node timed out",
    ]
    flag = tmp_path / "tried"  # fails the first time only
    flaky = [sys.executable, "-c", f"import pathlib, sys; p = pathlib.Path({str(flag)!r}); t = p.exists(); "
             "p.touch(); sys.exit(0 if t else 'Exception: busy')"]  # fmt: skip
    start_ray(lambda: flaky, {}, "no-such-run", Clock())
    assert flag.exists()


def test_free_ports_never_repeat_within_a_run(monkeypatch):
    """bind(0) may hand out a port twice; Ray refuses a start whose ports repeat."""
    from ray_llm_eks.adapters import ports

    given = iter([41001, 41001, 41002, 41001, 41003])

    class Socket:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            self.port = next(given)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(ports, "_HANDED_OUT", set())
    monkeypatch.setattr(ports.socket, "socket", Socket)
    assert [ports.free_port() for _ in range(3)] == [41001, 41002, 41003]


def test_a_traceback_vllm_logs_as_a_warning_is_not_an_engine_error(tmp_path):
    # vLLM 0.26 with nixl-cu13 logs a missing optional module's import traceback at WARNING on every start
    # (seen on the GPU rehearsal); the engine's real error, logged at ERROR, must come first and alone.
    warned = "(Worker pid=8) WARNING 12-01 18:00:39 [import_utils.py:408] "
    (tmp_path / "worker-3.out").write_text(
        f"{warned}Traceback (most recent call last):\n"
        f'{warned}  File "<frozen importlib._bootstrap>", line 1387, in _gcd_import\n'
        f"{warned}ModuleNotFoundError: No module named 'nixl_ep_cu13'\n"
        "(Worker pid=8) ERROR 12-01 18:00:40 [core.py:1] Traceback (most recent call last):\n"
        "(Worker pid=8) ERROR 12-01 18:00:40 [core.py:1] ValueError: max_num_seqs (256) exceeds available Mamba\n"
    )
    assert root_errors(tmp_path) == ["ValueError: max_num_seqs (256) exceeds available Mamba    [worker-3.out]"]


@pytest.mark.parametrize(("level", "error"), [("ERROR", True), ("CRITICAL", True), ("WARNING", False),
                                              ("INFO", False), ("DEBUG", False)])  # fmt: skip
def test_a_traceback_is_an_engine_error_at_vllms_error_levels_only(tmp_path, level, error):
    logged = f"(Worker pid=8) {level} 12-01 18:00:40 [core.py:1] "
    (tmp_path / "worker-3.out").write_text(f"{logged}Traceback (most recent call last):\n{logged}ValueError: boom\n")
    assert root_errors(tmp_path) == (["ValueError: boom    [worker-3.out]"] if error else [])


def test_a_later_node_draws_its_metrics_port_as_it_starts_and_the_urls_name_it(monkeypatch):
    """On one GPU the decode node starts minutes after the head: a port drawn when the cluster was planned can
    be taken by then (its dashboard agent died on bind), and the metrics endpoints must name the port it got."""
    from ray_llm_eks.adapters import ports
    from rehearsal import ray_cluster
    from rehearsal.ray_cluster import Node, cluster, start_node

    handed: list[int] = []

    def drawn() -> int:
        handed.append(ports.free_port())
        return handed[-1]

    commands: list[list[str]] = []

    def ray_start(command, **_):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(ray_cluster, "free_port", drawn)
    monkeypatch.setattr(ray_cluster.subprocess, "run", ray_start)
    head, decode = Node("head", cpus=1, ip="127.0.0.2"), Node("decode", cpus=1, ip="127.0.0.2", after_role="prefill")
    ray = cluster([head, decode], "no-such-run", {})
    ctx = Context(None, {}, "", None, "m", False, "", lambda: ray.metrics_urls, [], None, "r", Clock(), "llm")
    start_node(ray, head, "no-such-run", Clock())
    assert ctx.metrics_urls == [f"http://127.0.0.2:{head.metrics_port}/metrics"]  # no URL of a node not started
    taken = set(handed)  # by now another process may hold any port drawn so far
    start_node(ray, decode, "no-such-run", Clock())
    port = int(next(a for a in commands[-1] if a.startswith("--metrics-export-port=")).split("=")[1])
    assert port not in taken and port == decode.metrics_port
    assert ctx.metrics_urls == [f"http://127.0.0.2:{head.metrics_port}/metrics", f"http://127.0.0.2:{port}/metrics"]
    restarted = ray.command(head)  # the head fault starts the head again on the same ports
    assert f"--metrics-export-port={head.metrics_port}" in restarted


def _ray_cluster_in(tmp_path):
    from rehearsal.ray_cluster import Cluster, Node

    node = Node("head", cpus=1, temp_dir=tmp_path / "rllm-test")
    (node.log_dir).mkdir(parents=True)
    (node.log_dir / "raylet.out").write_text("the raylet's log\n")
    return Cluster([node], 0, 0, {})


@pytest.mark.parametrize(("ok", "keep", "kept"), [(False, False, True), (True, False, False), (True, True, True)])
def test_a_failed_run_keeps_rays_logs_and_says_where_a_passed_one_deletes_them(
    tmp_path, monkeypatch, capsys, ok, keep, kept
):
    from rehearsal import run

    monkeypatch.setattr(run, "end_processes", lambda run_id: 0)
    ray = _ray_cluster_in(tmp_path)
    run.teardown(ray, "test", ok=ok, keep_logs=keep)
    said = capsys.readouterr().out
    assert ray.nodes[0].log_dir.joinpath("raylet.out").exists() == kept
    assert (f"Ray's logs kept in {ray.nodes[0].log_dir}" in said) == kept
    if kept:
        assert f"rm -rf {ray.nodes[0].temp_dir}" in said


def test_the_kept_logs_are_named_by_each_nodes_log_dir_and_the_switch_is_documented(tmp_path):
    from rehearsal import run

    ray = _ray_cluster_in(tmp_path)
    assert run.kept_logs(ray) == f"Ray's logs kept in {ray.nodes[0].log_dir}"
    assert "--keep-ray-logs" in (ROOT / "docs" / "rehearsals.md").read_text()


def test_the_timeline_names_each_engines_max_num_seqs_from_the_deployed_config():
    from rehearsal.run import max_num_seqs_line

    doc = copy.deepcopy(rendered("dev"))

    def seqs(role: str, config: dict) -> None:
        if role == "prefill":
            config.setdefault("engine_kwargs", {})["max_num_seqs"] = 7
        else:
            config.setdefault("engine_kwargs", {}).pop("max_num_seqs", None)

    substitute.edit_roles(doc, "test", seqs)
    line = max_num_seqs_line(doc)
    assert line.startswith("max_num_seqs per engine: prefill 7, decode unset (vLLM's default) ")
    assert "vLLM 0.26 logs no line with it" in line
    baseline = parse_document(rendered("baseline"), "test").roles["collocated"].engine
    assert max_num_seqs_line(rendered("baseline")).startswith(
        f"max_num_seqs per engine: collocated {baseline.get('max_num_seqs', 'unset')}"
    )


def test_set_renders_the_stack_with_a_key_over_its_file():
    """`ARGS="--set selectivePd=28"`: the stack key itself, through the program's own rendering."""
    assert stack_overrides(["selectivePd=28", "aws:region=eu-west-1"]) == {
        "ray-llm-eks:selectivePd": "28",
        "aws:region": "eu-west-1",
    }
    app = yaml.safe_load(deployed_spec("dev", ["selectivePd=28"])["serveConfigV2"])["applications"][0]
    assert app["import_path"] == "selective_pd:build_selective_pd_app"
    assert parse_document({"applications": [app]}, "test").local_prefill_below == 28
    assert parse_document(rendered("dev"), "test").local_prefill_below is None


@pytest.mark.parametrize(
    "setting, line",
    [
        ("selectivePd", "--set selectivePd: KEY=VALUE"),
        ("selectivePd=many", "selectivePd = many: off, or a prompt length in tokens"),
        ("selectivPd=28", "selectivPd"),
    ],
)
def test_a_bad_set_is_refused_in_one_line(setting, line):
    args = SimpleNamespace(spec=None, set=[setting], stack="dev", target="cpu")
    with pytest.raises(substitute.CannotRehearse, match=re.escape(line)):
        prepare(args, [], 8000)


def test_a_port_is_bindable_again_only_once_its_listener_is_gone():
    """The head restart waits for its metrics port: a live listener holds it, a closed one does not."""
    import socket

    from ray_llm_eks.adapters.ports import bindable

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    assert not bindable(port, cap=0.6)
    # What the head restart says when it must move: the process and the socket's state.
    from rehearsal.faults import port_holders, title

    assert port_holders(port) == [f"{os.getpid()} {title(os.getpid())[:60]}: LISTEN"]
    listener.close()
    assert bindable(port, cap=0.6)
    assert port_holders(port) == []


def test_a_process_whose_environment_shows_no_marker_is_still_found_through_its_parent():
    """Ray's agents retitle themselves and can blank the environment /proc shows; the head fault must still kill
    them (one kept the head's metrics port once). Here the child is started with an empty environment."""
    from rehearsal.faults import NODE_MARKER, node_pids
    from rehearsal.processes import MARKER, our_pids

    env = dict(os.environ, **{MARKER: "t-descendants", NODE_MARKER: "head"})
    script = (
        "import subprocess, sys; subprocess.Popen(['env', '-i', 'sleep', '60']); b = subprocess.Popen(['sleep', '60']);"
        " sys.stdout.write('up\\n'); sys.stdout.flush(); b.wait()"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "up\n"
        found = our_pids("t-descendants")
        assert parent.pid in found and len(found) == 3, found  # the parent, its `env -i sleep` and its sleep
        assert node_pids("t-descendants", "head") == found
        assert node_pids("t-descendants", "worker") == []
    finally:
        for pid in our_pids("t-descendants"):
            os.kill(pid, 9)
        parent.wait(10)


def test_the_stand_in_is_built_for_the_longest_context_a_role_runs_at():
    """An engine without max_model_len (or with -1) runs at the stand-in's own length; a longer one set on any role
    makes the stand-in that long."""
    from rehearsal.prepare import _max_len
    from rehearsal.tiny_model import STAND_IN_MAX_POSITIONS

    doc = copy.deepcopy(rendered("dev"))
    substitute.edit_roles(
        doc, "test", lambda role, config: config.setdefault("engine_kwargs", {}).pop("max_model_len", None)
    )
    assert _max_len(doc) == STAND_IN_MAX_POSITIONS
    lengths = dict(zip(parse_document(doc, "test").roles, (-1, 3 * STAND_IN_MAX_POSITIONS), strict=True))
    substitute.edit_roles(doc, "test", lambda role, config: config["engine_kwargs"].update(max_model_len=lengths[role]))
    assert _max_len(doc) == 3 * STAND_IN_MAX_POSITIONS
