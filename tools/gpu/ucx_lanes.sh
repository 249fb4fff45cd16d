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

echo "== NVLink as NVML reports it"
# UCX 1.21.0 (the one nixl-cu13 1.3.1 bundles) turns cuda_ipc GETs off where NVML counts no NVLink
# (src/uct/cuda/cuda_ipc/cuda_ipc_iface.c, UCX_CUDA_IPC_ENABLE_GET_ZCOPY=auto), and where NVML counts links whose
# remote PCI query fails, it caches the count after answering 0 once: the first UCX worker of a process gets GETs
# off, the later ones on (fixed in 1.22.0, openucx/ucx#11554). A count above 0 with a failing query is that case.
nvidia-smi nvlink -s 2>&1 | head -4
python3 - <<'EOF_NVML' 2>&1 | tail -6
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
count = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
print("nvml link count:", count.value.uiVal if count.nvmlReturn == 0 else f"error {count.nvmlReturn}")
# nvidia-ml-py names it with or without _v2 depending on its version.
remote_pci = getattr(n, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or n.nvmlDeviceGetNvLinkRemotePciInfo
try:
    print("link 0 state:", n.nvmlDeviceGetNvLinkState(h, 0))
    print("link 0 remote PCI:", remote_pci(h, 0).busId)
except n.NVMLError as exc:
    print("link 0 query failed:", exc)
EOF_NVML

echo "== cuda_ipc in UCX's debug log (one READ)"
UCX_LOG_LEVEL=debug $PROBE --transfers 1 2>&1 | grep -iE 'cuda_ipc|cuda-ipc|reachab|nvlink|ipc' \
  | sed -E 's/^\[[0-9.]+\] \[[^]]*\] *//' | sort | uniq -c | sort -rn | head -30

# One transfer kind under one setting: the protocol UCX chose for it, any error, and the probe's figures.
lane() {
  local op="$1" setting="$2" flags="${3:-}" out="${TMPDIR:-/tmp}/lane.out"
  echo "== $op with ${setting:-the defaults} ${flags}"
  env $setting UCX_PROTO_INFO=y $PROBE --op "$op" $flags > "$out" 2>&1
  # The table of this op between GPU buffers (UCX prints one per op and memory pair; host ones come first).
  local table='remote memory read by ucp_get.* into cuda'
  [ "$op" = WRITE ] && table='remote memory write by ucp_put.* from cuda'
  grep -E -A4 "$table" "$out" | head -10
  grep -iE 'error|failed|unreachable|no .*transport' "$out" | head -4
  tail -1 "$out"
}

# The probe as it was (UCX started before CUDA, NIXL's default threads), then each difference from vLLM's agent alone.
lane READ "" "--agent-first --threads 0"
lane READ "" "--threads 0"
lane READ "" --agent-first
# NIXL 1.3.1 sends a READ of fewer than 1,024 descriptors through its shared UCX worker (the first one made) and
# splits a larger one over the others (src/plugins/ucx/ucx_backend.cpp split_batch_size): with UCX 1.21.0's
# NVLink caching above, the two can take different lanes.
lane READ "" "--descriptors 2048"
# The same READ between two Ray actors placed as Ray Serve LLM places vLLM's GPU worker (our engines' layout; plain
# vllm serve holds its agent in the EngineCore process): with and without our app's worker setup hook.
lane READ "" --ray
lane READ "" "--ray --no-setup-hook"
for setting in "" "UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on" \
  "UCX_TLS=cuda_ipc,cuda_copy,self UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on"; do
  lane READ "$setting"
  lane WRITE "$setting"
done
