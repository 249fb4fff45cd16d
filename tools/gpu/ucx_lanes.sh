#!/usr/bin/env bash
# Which lane NIXL's UCX backend gives a KV transfer between two processes on this GPU machine, and why: whether
# CUDA IPC works here at all (PyTorch's own, no UCX), what UCX's debug log says of cuda_ipc, then the protocol UCX
# chose (UCX_PROTO_INFO) and the probe's figures for a READ (vLLM 0.26's pull connector) and a WRITE (its push
# connector) under each setting. Run in the rehearsal's Python (torch and nixl), e.g. as a `cmd:` line of
# tools/gpu/device.sh; a few seconds a line. PROBE: the probe command (e.g. --device cpu to try the script here).
set -u
PROBE="${PROBE:-timeout 180 python3 -m rehearsal.nixl_probe --device cuda}"

echo "== CUDA IPC between two processes (torch.multiprocessing shares a CUDA tensor by cudaIpcGetMemHandle)"
# A file, not stdin: multiprocessing's spawn imports the main module again in the child.
ipc_check="${TMPDIR:-/tmp}/cuda_ipc_check.py"
cat > "$ipc_check" <<'EOF'
import torch, torch.multiprocessing as mp

def child(queue, answer):
    try:
        answer.put(float(queue.get().sum().item()))
    except Exception as exc:  # what CUDA says where IPC is refused
        answer.put(f"{type(exc).__name__}: {exc}")

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue, answer = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(queue, answer))
    proc.start()
    tensor = torch.ones(1 << 20, device="cuda")
    queue.put(tensor)
    print("cuda ipc: the other process read", answer.get(timeout=60), "of", tensor.numel())
    proc.join(30)
EOF
timeout 120 python3 "$ipc_check" 2>&1 | grep -v '^ ' | tail -4

echo "== cuda_ipc in UCX's debug log (one READ)"
UCX_LOG_LEVEL=debug $PROBE --transfers 1 2>&1 | grep -iE 'cuda_ipc|cuda-ipc|reachab|nvlink|ipc' \
  | sed -E 's/^\[[0-9.]+\] \[[^]]*\] *//' | sort | uniq -c | sort -rn | head -30

# One transfer kind under one setting: the protocol UCX chose for it, any error, and the probe's figures.
lane() {
  local op="$1" setting="$2" flags="${3:-}" out="${TMPDIR:-/tmp}/lane.out"
  echo "== $op with ${setting:-the defaults} ${flags}"
  env $setting UCX_PROTO_INFO=y $PROBE --op "$op" $flags > "$out" 2>&1
  grep -E -A4 'intra-node.*remote memory (read|write)|remote memory (read|write).*intra-node' "$out" | head -10
  grep -iE 'error|failed|unreachable|no .*transport' "$out" | head -4
  tail -1 "$out"
}

# The probe as it was (UCX started before CUDA, NIXL's default threads), then each difference from vLLM's agent alone.
lane READ "" "--agent-first --threads 0"
lane READ "" "--threads 0"
lane READ "" --agent-first
for setting in "" "UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on" \
  "UCX_TLS=cuda_ipc,cuda_copy,self UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on"; do
  lane READ "$setting"
  lane WRITE "$setting"
done
