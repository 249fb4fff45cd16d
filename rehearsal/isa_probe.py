"""Run as a script by rehearsal.isa_cap, in a child process of the rehearsal venv's Python, with the engines'
environment and one ONEDNN_MAX_CPU_ISA: the oneDNN matmuls a CPU engine's first forward pass runs, in bf16
(the stand-in's dtype), through torch's bundled oneDNN and through vLLM's own (the linear layers: vLLM 0.26
model_executor/layers/utils.py dispatch_cpu_unquantized_gemm, ops.create_onednn_mm), then, where vLLM has its CPU
Gated DeltaNet kernel, that kernel on both sides of such a matmul, as a hybrid model's layers follow each other
(each alone can run where the sequence traps). An instruction this host
cannot execute kills it by a signal (SIGILL), which only a child can survive being asked.

It prints `step: <what>` before each step (flushed: the last one names where it died) and, with
ONEDNN_VERBOSE=1 set by the caller, oneDNN's own `info,cpu,isa:` line (the ISA it dispatches to). It imports
nothing of the project."""

import os
import sys


def step(what: str) -> None:
    print(f"step: {what}", flush=True)


def main() -> int:
    step("import torch")
    import torch

    # Rows: one decode token, a short and a longer prefill (oneDNN picks its kernels by shape).
    rows = (1, 32, 512)
    x = torch.randn(max(rows), 256, dtype=torch.bfloat16)
    w = torch.randn(512, 256, dtype=torch.bfloat16)
    step("torch's oneDNN: bf16 linear")
    for m in rows:
        torch.nn.functional.linear(x[:m], w)
    step("import vLLM's CPU kernels (vllm._custom_ops)")
    from vllm import _custom_ops as ops

    if not ops._supports_onednn:
        step("done (vLLM built without oneDNN)")
        return 0
    step("vLLM's oneDNN: bf16 matmul (create_onednn_mm, onednn_mm)")
    try:
        handler = ops.create_onednn_mm(w.t(), 32)
    except RuntimeError as exc:  # vLLM falls back to torch's linear then (dispatch_cpu_unquantized_gemm)
        step(f"done (vLLM's oneDNN refused the matmul, as vLLM falls back: {str(exc)[:120]})")
        return 0
    for m in rows:
        ops.onednn_mm(handler, x[:m], None)
    if hasattr(torch.ops._C, "chunk_gated_delta_rule_cpu"):
        # A hybrid model's layers in the engine's order: a Gated DeltaNet layer (its kernel's brgemm through
        # torch's oneDNN ukernel), a linear layer (vLLM's oneDNN matmul), then the next Gated DeltaNet layer. With
        # AMX the second kernel trapped on `tilezero` (SIGILL) on an Intel Xeon reporting `amx_tile` where each
        # kernel alone ran: the tile configuration did not survive the matmul between them.
        step("vLLM's Gated DeltaNet kernel, vLLM's oneDNN matmul, the kernel again (a hybrid model's layer order)")
        for kernel in (gated_delta_rule, lambda: ops.onednn_mm(handler, x[:32], None), gated_delta_rule):
            kernel()
    step("done")
    return 0


def gated_delta_rule() -> None:
    """vLLM 0.26's CPU Gated DeltaNet prefill kernel (model_executor/layers/mamba/ops/cpu/gdn_attention.py
    `_cpu_gdn_attention_nonspec`) at the rehearsal's stand-in shapes: 44 tokens, 2 key and 4 value heads of 64."""
    import torch
    from vllm import _custom_ops as ops

    tokens, key_heads, value_heads, dim = 44, 2, 4, 64
    ops.chunk_gated_delta_rule_cpu(
        query=torch.randn(1, tokens, key_heads, dim, dtype=torch.bfloat16),
        key=torch.randn(1, tokens, key_heads, dim, dtype=torch.bfloat16),
        value=torch.randn(1, tokens, value_heads, dim, dtype=torch.bfloat16),
        g=-torch.rand(1, tokens, value_heads),
        beta=torch.rand(1, tokens, value_heads, dtype=torch.bfloat16),
        initial_state=torch.zeros(1, value_heads, dim, dim),
        output_final_state=True,
        cu_seqlens=torch.tensor([0, tokens], dtype=torch.int32),
        head_first=False,
        use_qk_l2norm_in_kernel=True,
    )


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Past "done" nothing is left to learn: skip the interpreter's teardown, where vLLM's import leaves threads
    # and exit hooks that took tens of seconds on a loaded 2-core host (the probe ran past its timeout there).
    os._exit(code)
