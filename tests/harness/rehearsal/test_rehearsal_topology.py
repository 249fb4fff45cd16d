"""What the rehearsal checks to call a run that topology (rehearsal.topology, rehearsal.cpu_threads): replicas
per role as the serve config asks, every replica served, KV read from every prefill replica, every TP rank
at work, no two busy threads of one engine on one core; and the CPU's TP substitution. Pure: no Ray, no vLLM."""

from __future__ import annotations

import pytest

from rehearsal import checks, cpu_threads, prepare, run, substitute, topology, verify


def rendered(stack: str) -> dict:
    return prepare.rendered_document(stack)


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        ("xpyd", {"prefill": 2, "decode": 1}),
        ("dp", {"collocated": 2}),
        ("dev", {"prefill": 1, "decode": 1}),
        ("tp", {"collocated": 1}),
    ],
)
def test_replicas_at_start_follow_the_rendered_serve_config(stack, expected):
    assert topology.expected_replicas(rendered(stack)) == expected


def test_initial_replicas_and_num_replicas_win_over_min_replicas():
    doc = rendered("xpyd")
    args = doc["applications"][0]["args"]
    args["prefill_config"]["deployment_config"]["autoscaling_config"]["initial_replicas"] = 3
    args["decode_config"]["deployment_config"] = {"num_replicas": 4}
    assert topology.expected_replicas(doc) == {"prefill": 3, "decode": 4}


def _app(prefill_states, decode_states):
    def replicas(states, prefix):
        return [{"replica_id": f"{prefix}{i}", "state": s, "worker_id": f"w{prefix}{i}"} for i, s in enumerate(states)]

    return {
        "deployments": {
            "Prefill:Qwen--Qwen3_5-9B": {"replicas": replicas(prefill_states, "p")},
            "Decode:Qwen--Qwen3_5-9B": {"replicas": replicas(decode_states, "d")},
            "OpenAiIngress": {"replicas": replicas(["RUNNING"], "i")},
        }
    }


def test_a_role_short_of_running_replicas_is_named():
    expected = {"prefill": 2, "decode": 1}
    running = topology.running_replicas(_app(["RUNNING", "RUNNING"], ["RUNNING"]))
    assert {role: len(reps) for role, reps in running.items()} == {"prefill": 2, "decode": 1}  # ingress left out
    assert topology.replica_mismatches(expected, running) == []
    short = topology.running_replicas(_app(["RUNNING", "STARTING"], ["RUNNING"]))
    assert topology.replica_mismatches(expected, short) == [
        "prefill: 1 RUNNING replica(s), the serve config asks 2 at start"
    ]


METRICS = """# HELP ray_serve_deployment_request_counter_total The number of queries
ray_serve_deployment_request_counter_total{application="llm",deployment="Prefill:Qwen",replica="p0",route="/"} 3.0
ray_serve_deployment_request_counter_total{application="llm",deployment="Prefill:Qwen",replica="p0",route="/x"} 1.0
ray_serve_deployment_request_counter_total{application="llm",deployment="Decode:Qwen",replica="d0",route="/"} 5.0
ray_serve_deployment_request_counter_total{application="llm",deployment="Prefill:Qwen",replica="p1",route="/"} 0.0
"""


def test_requests_are_counted_per_replica_and_a_replica_that_served_none_is_named():
    served = topology.requests_per_replica(METRICS)
    assert served == {"p0": 4.0, "d0": 5.0, "p1": 0.0}
    running = topology.running_replicas(_app(["RUNNING", "RUNNING"], ["RUNNING"]))
    assert topology.idle_replicas(running, served) == ["prefill/p1"]
    assert topology.idle_replicas(running, {**served, "p1": 1.0}) == []


def test_kv_must_be_read_from_every_prefill_replica(tmp_path):
    prefix = "(Worker pid=7) INFO 11-30 19:40:01 [base_worker.py:250] "
    (tmp_path / "worker-wp0-01000000-101.out").write_text(f"{prefix}Initializing NIXL worker aB3dE9-127.0.0.1-20000\n")
    (tmp_path / "worker-wp1-01000000-102.out").write_text(f"{prefix}Initializing NIXL worker Zq81xx-127.0.0.1-20001\n")
    read = "(Worker pid=9) DEBUG 11-30 19:41:00 [pull_worker.py:171] Remote agent {} available, calling _read_blocks"
    decode_log = tmp_path / "worker-wd0-01000000-103.out"
    decode_log.write_text((read.format("aB3dE9-127.0.0.1-20000") + " on remote rank 0 for req 1\n") * 2)
    running = topology.running_replicas(_app(["RUNNING", "RUNNING"], ["RUNNING"]))
    engines, reads = verify.kv_sources(tmp_path, running)
    assert engines == {"p0": "aB3dE9-127.0.0.1-20000", "p1": "Zq81xx-127.0.0.1-20001"}
    assert reads == {"aB3dE9-127.0.0.1-20000": 2}
    assert topology.prefills_not_read(engines, reads) == [
        "prefill/p1 (engine Zq81xx-127.0.0.1-20001): no decode engine read KV from it"
    ]
    with decode_log.open("a") as log:
        log.write(read.format("Zq81xx-127.0.0.1-20001") + "\n")
    assert topology.prefills_not_read(*verify.kv_sources(tmp_path, running)) == []


def test_the_pull_worker_alone_logs_at_debug_in_vllms_format():
    config = topology.vllm_logging_config()
    assert config["loggers"]["vllm"]["level"] == "INFO"
    assert config["loggers"][topology.PULL_WORKER_LOGGER] == {"level": "DEBUG"}
    # rehearsal.run's PREFIXES strips exactly this prefix from an engine's error lines.
    assert config["formatters"]["vllm"]["format"].startswith("%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d]")


def test_every_tp_rank_must_have_used_cpu():
    seconds = {"VLLM::Worker_TP0 (pid 5)": 2.5, "VLLM::Worker_TP1 (pid 6)": 2.1, "ray::ServeReplica (pid 4)": 9.0}
    assert topology.rank_seconds(seconds) == {0: 2.5, 1: 2.1}
    assert topology.idle_ranks(topology.rank_seconds(seconds), 2) == []
    assert topology.idle_ranks({0: 2.5, 1: 0.0}, 2) == ["TP rank 1: used no CPU during the requests"]
    assert topology.idle_ranks({0: 2.5}, 2) == ["TP rank 1: no worker process"]
    assert topology.rank_seconds({"VLLM::Worker_DP0_TP1 (pid 8)": 1.0}) == {1: 1.0}


def test_tensor_parallelism_is_lowered_to_the_cores_each_rank_on_its_own():
    doc = rendered("tp")
    local = substitute.for_cpu(doc, "/m", "qwen3", cores=(0, 1))
    engine = local.document["applications"][0]["args"]["llm_configs"][0]
    assert engine["engine_kwargs"]["tensor_parallel_size"] == 2
    assert engine["runtime_env"]["env_vars"][substitute.OMP_BIND] == "0|1"
    assert any("tensor_parallel_size: 4 -> 2" in line for line in local.substitutions)
    kept = substitute.for_cpu(doc, "/m", "qwen3", cores=(0, 1, 2, 3))
    assert topology.tensor_parallel_size(kept.document) == 4
    kept_env = kept.document["applications"][0]["args"]["llm_configs"][0]["runtime_env"]["env_vars"]
    assert kept_env[substitute.OMP_BIND] == "0|1|2|3"
    assert not any("tensor_parallel_size:" in line for line in kept.substitutions)


def test_tensor_parallelism_is_refused_in_one_line_where_it_cannot_run():
    with pytest.raises(substitute.CannotRehearse, match=r"tensor_parallel_size = 4: this machine has 1 physical"):
        substitute.for_cpu(rendered("tp"), "/m", "qwen3", cores=(0,))
    pd = rendered("dev")
    pd["applications"][0]["args"]["prefill_config"]["engine_kwargs"]["tensor_parallel_size"] = 2
    with pytest.raises(substitute.CannotRehearse, match=r"prefill/decode with tensor_parallel_size > 1"):
        substitute.for_cpu(pd, "/m", "qwen3_next", cores=(0, 1))


def _fake_thread(proc, pid, tid, name, ticks, cpus, title="VLLM::Worker"):
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "cmdline").write_bytes(title.encode() + b"\0")
    (proc / str(pid) / "comm").write_text(title[:15] + "\n")
    # stat: pid (comm) state, then fields 4..13, utime (14), stime (15)
    (task / "stat").write_text(f"{tid} ({name}) R " + "0 " * 10 + f"{ticks} 0 0 0\n")
    (task / "status").write_text(f"Name:\t{name}\nCpus_allowed_list:\t{cpus}\n")
    (task / "comm").write_text(name + "\n")


def test_two_busy_threads_of_one_engine_on_one_core_are_found(tmp_path):
    before = tmp_path / "before"
    after = tmp_path / "after"
    for root, ticks in ((before, 0), (after, 100)):  # 100 ticks in 1 s at 100 Hz: a whole core
        _fake_thread(root, 10, 10, "python", ticks, "1")
        _fake_thread(root, 10, 11, "omp_worker", ticks, "1")
        _fake_thread(root, 10, 12, "ucx_progress", ticks // 10, "1")  # 10%: not busy
        _fake_thread(root, 20, 20, "python", ticks, "1", title="VLLM::Worker_TP1")  # another engine: takes turns
    busy = cpu_threads.busy(cpu_threads.sample([10, 20], before), cpu_threads.sample([10, 20], after), 1.0, hz=100)
    assert sorted((t.pid, t.tid) for t, _ in busy) == [(10, 10), (10, 11), (20, 20)]
    (pair,) = cpu_threads.pinned_pairs(busy)
    assert pair.startswith("VLLM::Worker (pid 10): 2 busy threads bound to core 1 only")
    one_each = [(t, used) for t, used in busy if t.tid != 11]
    assert cpu_threads.pinned_pairs(one_each) == []
    seconds = cpu_threads.process_seconds(cpu_threads.sample([20], before), cpu_threads.sample([20], after), hz=100)
    assert seconds == {"VLLM::Worker_TP1 (pid 20)": 1.0}


def test_cpu_lists_in_the_kernels_format():
    assert cpu_threads.parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    assert cpu_threads.parse_cpu_list("1") == {1}
    assert cpu_threads.parse_cpu_list("") == frozenset()


def test_ctrl_c_while_preparing_prints_one_line_and_exits_130(monkeypatch, capsys):
    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "prepare", interrupted)
    assert run.main(["--stack", "dev"]) == 130
    out = capsys.readouterr()
    assert out.out.strip().splitlines() == [
        "interrupted while preparing the serve config and the stand-in model (no Ray process had started)"
    ]
    assert "Traceback" not in out.err


def test_a_stack_this_machine_cannot_rehearse_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(prepare, "physical_cores", lambda: (0,))
    monkeypatch.setattr(prepare, "make_model", lambda *_: pytest.fail("no model is built for a refused stack"))
    assert run.main(["--stack", "tp"]) == 2
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("REHEARSAL REFUSED (not on this machine): collocated.engine_kwargs.tensor_parallel_size = 4")


def test_the_scale_demo_lowers_one_roles_target_and_checks_that_role_alone_rose():
    doc = rendered("xpyd")
    line = substitute.scale_demo(doc, "decode")
    assert line.startswith("decode.deployment_config.autoscaling_config.target_ongoing_requests: 32 -> 1")
    args = doc["applications"][0]["args"]
    assert args["prefill_config"]["deployment_config"]["autoscaling_config"]["target_ongoing_requests"] == 4
    start = {"prefill": 2, "decode": 1}
    assert topology.scaled_alone(start, {"prefill": 2, "decode": 2}, "decode") == []
    assert topology.scaled_alone(start, {"prefill": 3, "decode": 2}, "decode") == ["prefill: target moved 2 -> 3"]
    assert topology.scaled_alone(start, start, "decode") == ["decode: target stayed 1"]
    app = {"deployments": {"Decode:Q": {"target_num_replicas": 2}, "Prefill:Q": {"target_num_replicas": 2},
                           "OpenAiIngress": {"target_num_replicas": 5}}}  # fmt: skip
    assert topology.targets(app) == {"decode": 2, "prefill": 2}


def test_the_scale_demo_needs_a_role_that_can_grow():
    with pytest.raises(ValueError, match="no autoscaling range"):
        substitute.scale_demo(rendered("dev"), "decode")
    with pytest.raises(ValueError, match="no such role here"):
        substitute.scale_demo(rendered("dp"), "decode")


def test_ray_is_given_cpus_for_every_engine_and_the_scale_demos_one_more():
    doc = rendered("xpyd")  # 3 engines at start, each 1 CPU for the replica actor + 1 per TP rank, + ingress + 1
    assert topology.logical_cpus(doc, floor=0) == 8
    assert topology.logical_cpus(doc, {"decode": 1}, floor=0) == 10
    assert topology.logical_cpus(rendered("tp"), floor=0) == 7  # one replica over 4 ranks
    assert topology.logical_cpus(rendered("baseline")) == 8  # never below the floor


def test_a_deferred_check_fails_the_run_at_the_end_and_the_others_still_run():
    from rehearsal.checks import Check, run_all
    from rehearsal.context import Clock, Context, RehearsalFailed

    ran = []

    def failing(ctx):
        raise RehearsalFailed("figures off")

    ctx = Context(None, {}, "", None, "m", False, "", list, [], None, "r", Clock(), "llm")
    checks = [Check("figures", failing, defer=True), Check("smoke", lambda ctx: ran.append("smoke"))]
    assert run_all(ctx, checks) == ["figures: figures off"] and ran == ["smoke"]
    with pytest.raises(RehearsalFailed, match="figures off"):
        run_all(ctx, [Check("figures", failing), *checks[1:]])
    assert ran == ["smoke"]  # a failure that is not deferred stops the run there
    # ... and its line keeps the deferred failures before it, which came first

    def empty_panels(ctx):
        raise RehearsalFailed("panels empty")

    with pytest.raises(RehearsalFailed, match=r"^figures: figures off; queries: panels empty$"):
        run_all(ctx, [checks[0], Check("queries", empty_panels)])


def test_each_extra_check_runs_only_with_its_own_flag():
    every = checks.all_checks()
    parser = run.parser_for(every)

    def chosen(*flags: str) -> set[str]:
        return {c.name for c in checks.selected(every, parser.parse_args(["--stack", "dev", *flags]))}

    plain = chosen()
    by_flag = {
        "--prometheus": {"prometheus", "dashboard and rule queries"},
        "--kv-fault": {"fault: KV path broken in place"},
        "--compare-routers": {"compare routers"},
        "--scale-demo=prefill": {"scale demo"},
        "--bench=/tmp/b": {"bench"},
        "--quick-bench=/tmp/q.json": {"quick bench"},
        "--faults": {"faults"},
    }
    for flag, names in by_flag.items():
        assert not names & plain, flag
        assert chosen(flag) == plain | names, flag
