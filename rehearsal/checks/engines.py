"""What the engines say about themselves, beside what the project predicted: vLLM's memory lines against the fit
check's prediction (GPU target with --emulate: measure/vllm_log.py compares them and the rehearsal fails where they
disagree beyond the fit's tolerance), and, for PD, that every engine registered its KV cache with the
kv_buffer_device the document asks for and decode passed NIXL's compatibility check with prefill."""

from __future__ import annotations

import re
from dataclasses import asdict

from measure import vllm_log
from ray_llm_eks.domain.fit import model_fit
from ray_llm_eks.domain.serving.fields import given
from ray_llm_eks.domain.serving.serve_app import parse_document
from ray_llm_eks.domain.serving.serve_config import role_of
from rehearsal import logs, topology, verify
from rehearsal.checks import Check
from rehearsal.context import Context, RehearsalFailed, say

# vLLM 0.26 nixl/base_worker.py register_kv_caches and _validate_remote_agent_handshake log these.
REGISTERED = re.compile(r"Registering KV_Caches\. use_mla: \w+, kv_buffer_device: (\w+), use_host_buffer: (\w+)")
COMPATIBLE = "NIXL compatibility check passed"
# Ray prefixes a replica's lines with its actor: "(ServeReplica:<app>:<deployment> pid=...)".
REPLICA = re.compile(r"ServeReplica:[^:\s]+:([^\s)]+)")
SHOWN = ("weights_gib", "kv_cache_gib", "kv_tokens", "concurrency", "block_size", "mamba_blocks", "max_num_seqs")


def engine_logs(ctx: Context) -> dict[str, tuple[str, str]]:
    """`role/replica` -> (role, what its processes logged); before the replicas run (a failed start), every
    worker log that holds vLLM's memory lines, by file name, its role read from Ray's prefix."""
    if ctx.running:
        return {f"{role}/{r['replica_id']}": (role, verify.replica_log(ctx.log_dirs, r))
                for role, reps in sorted(ctx.running.items()) for r in reps}  # fmt: skip
    found = {}
    for path in logs.log_files(ctx.log_dirs):
        if not path.name.startswith("worker-"):
            continue
        text = path.read_text(errors="replace")
        if any(not e.empty for e in vllm_log.parse(text)) and (deployment := REPLICA.search(text)):
            found[path.name] = (role_of(deployment.group(1)), text)
    return found


def fits(ctx: Context) -> tuple[dict[str, model_fit.RoleFit], str]:
    """The fit check's prediction per role (ray_llm_eks/domain/fit/model_fit.py fit_document) for the emulated GPU, or
    why none."""
    run = ctx.gpu
    if run is None or run.cpu_engines:
        return {}, "no prediction for CPU engines"
    if run.emulate is None:
        return (
            {},
            "no prediction without --emulate (the fit predicts for a GPU of "
            "ray_llm_eks/domain/platform/aws_facts.py's table)",
        )
    if run.model is None:
        return {}, "no prediction: the model is not in ray_llm_eks/domain/serving/model_table.py's table"
    doc = run.prediction_document
    roles = topology.expected_replicas(doc)
    instance_types = {role: run.emulate.instance_type for role in roles}
    return model_fit.fit_document(parse_document(doc, "rehearsal"), instance_types), ""


def memory_lines(ctx: Context, fail: bool = True) -> list[str]:
    """Each engine's memory lines beside the prediction; returns the engines that disagree (and fails on them)."""
    predicted, why = fits(ctx)
    disagree = []
    for who, (role, text) in engine_logs(ctx).items():
        started = [e for e in vllm_log.parse(text) if not e.config_only] or vllm_log.parse(text)
        if not started:
            say(f"  vLLM memory, {who}: no memory line in its log")
            continue
        measured = started[-1]
        ctx.results.setdefault("vllm memory", {})[who] = measured
        figures = ", ".join(
            f"{name} {getattr(measured, name)}" for name in SHOWN if getattr(measured, name) is not None
        )
        say(f"  vLLM memory, {who}: {figures}" + (f" [{why}]" if why else ""))
        if measured.refused:
            say(f"    refused: {measured.refused[:300]}")
        start = vllm_log.startup(text)
        ctx.results.setdefault("engine start", {})[who] = asdict(start)
        healthy = (
            f"; {role} healthy {ctx.healthy[role] - ctx.t_deploy:.0f} s after submit" if role in ctx.healthy else ""
        )
        say(f"  vLLM start, {who}: {start.line()}{healthy}")
        if role in predicted:
            verdict = vllm_log.compare(measured, predicted[role], emulated=True)
            for line in str(verdict).splitlines():
                say(f"    {line}")
            if not verdict.agree:
                disagree.append(who)
    if disagree and fail:
        raise RehearsalFailed(
            f"vLLM's memory lines disagree with the fit check beyond its tolerance: {', '.join(disagree)}"
        )
    return disagree


def _memory(ctx: Context) -> None:
    memory_lines(ctx)


def _kv_buffers(ctx: Context) -> None:
    """Every PD engine registered its KV cache where the document says; decode found prefill compatible."""
    roles = parse_document(ctx.document, "rehearsal").roles
    problems, seen = [], []
    for role in ("prefill", "decode"):
        want = given(roles[role].engine.kv_transfer_config.kv_buffer_device, "cuda")
        for replica in ctx.running.get(role, []):
            who = f"{role}/{replica['replica_id']}"
            text = verify.replica_log(ctx.log_dirs, replica)
            registered = REGISTERED.findall(text)
            seen += [f"{who}: kv_buffer_device {device}, use_host_buffer {host}" for device, host in registered]
            if not registered:
                problems.append(f"{who}: no 'Registering KV_Caches' line")
            elif any(device != want for device, _ in registered):
                problems.append(f"{who}: registered {registered[0][0]}, the document asks {want}")
            if role == "decode" and COMPATIBLE not in text:
                problems.append(f"{who}: no '{COMPATIBLE}' line")
    ctx.mark("KV caches registered with NIXL: " + "; ".join(seen))
    if problems:
        raise RehearsalFailed("KV path: " + "; ".join(problems))


MEMORY = Check("vllm memory", _memory, when=lambda ctx: ctx.target == "gpu", defer=True)
KV_BUFFERS = Check("kv buffers", _kv_buffers, when=lambda ctx: ctx.pd)
