#!/usr/bin/env bash
# The GPU rehearsal on a machine without network (the device tool runs this in a copy of the repository;
# `make gpu-wheels` made .whl/ here first). One piece a call, then one detached run:
#
#   tools/gpu/device.sh stage N   carry .whl/pN: park piece N under /tmp/w (it survives between calls)
#   tools/gpu/device.sh go        carry the last piece and .whl/kit: check the pieces' sha256, install the wheels
#                                 into /tmp/site, copy the repository to /tmp/kit, start the rehearsal(s) detached
#                                 (setsid: they outlive the call), then wait like `poll`
#   tools/gpu/device.sh more      carry .whl/kit: once the runs are done, start the runs of RUNS (as `go` reads them)
#                                 on the installed wheels, numbered after the earlier ones, then wait like `poll`
#   tools/gpu/device.sh poll      wait for them (printing their new lines) until done or WAIT seconds, then copy
#                                 the results to $OUT: results.tar.gz (rehearsal-<n>.log, bench and sweep JSON,
#                                 plain engines' logs), ray-logs-<n>.tar.gz where small, gpu.txt
#
# RUNS (or the file RUNS_FILE, e.g. a plan of tools/gpu/holds/, or .whl/kit/runs): rehearsal arguments, one run per
# line, run one after the other (default: the dev stack's PD app with random weights of the real model at the L4's
# budget, compile and CUDA graphs on, then a bench); a line `cmd:COMMAND` runs COMMAND in the repository instead (e.g.
# cmd:python3 -m rehearsal.nixl_probe); a line starting with # says why and runs nothing.
# WAIT: seconds this call may wait (default 540: a call may run 600). The machine goes back 30 s after a call
# returns unless another comes, and the detached run with it: send the next `poll` as soon as one returns.
set -u
mode="${1:-}"
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
# Everything under one directory that outlives the calls (DEVICE_TMP: to try this script elsewhere).
BASE="${DEVICE_TMP:-/tmp}"
W=$BASE/w RES=$BASE/res KIT=$BASE/kit SITE=$BASE/site WHEELS=$BASE/wheels OUT="${OUT:-$BASE/out}"
mkdir -p "$W" "$RES" "$OUT"
export PYTHONPATH=$SITE:$KIT/repo PATH=$SITE/bin:$PATH PYTHONUNBUFFERED=1 RAY_LLM_EKS_CACHE=$BASE/cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
DEFAULT_RUNS="--stack dev --spec $KIT/kit/dev.rayservice.json --random-weights --emulate L4 --quick-bench $RES/bench-1.json"

harvest() {
  # One archive of what the runs wrote (the device returns 8 files at most): their logs, the benches' JSON, the
  # plain engines' logs, and each run's Ray logs where small; the GPU's memory beside it.
  (cd "$RES" && shopt -s nullglob && files=(rehearsal-*.log bench-*.json sweep-*.json install*.log logs-*/vllm-*.log) \
    && [ ${#files[@]} -gt 0 ] && tar -czf "$OUT/results.tar.gz" "${files[@]}")
  for logs in "$RES"/logs-*/ray-logs.tar.gz; do
    [ -f "$logs" ] || continue
    name="ray-$(basename "$(dirname "$logs")").tar.gz"
    if [ "$(stat -c %s "$logs")" -lt 12000000 ]; then cp "$logs" "$OUT/$name"; else
      echo "$name is over 12 MB: left in $(dirname "$logs") on the machine" >> "$OUT/gpu.txt"
    fi
  done
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader >> "$OUT/gpu.txt" 2>&1
  cat "$RES/STATE" 2>/dev/null >> "$OUT/gpu.txt"
  ls -la "$OUT"
}

poll() {
  wait_s="${WAIT:-540}"
  seen=0
  while [ "$(el)" -lt "$wait_s" ]; do
    for log in "$RES"/rehearsal-*.log; do
      [ -f "$log" ] || continue
      lines=$(wc -l < "$log")
      key=$(basename "$log")
      last=$(cat "$RES/.seen-$key" 2>/dev/null || echo 0)
      if [ "$lines" -gt "$last" ]; then
        sed -n "$((last + 1)),${lines}p" "$log" | cut -c1-240 | tail -40
        echo "$lines" > "$RES/.seen-$key"
      fi
    done
    grep -q "ALL DONE" "$RES/STATE" 2>/dev/null && { seen=1; break; }
    sleep 10
  done
  echo "== $(date -u +%T) after $(el) s: $(cat "$RES/STATE" 2>/dev/null)"
  harvest
  [ "$seen" = 1 ]
}

copy_repo() {
  rm -rf "$KIT" && mkdir -p "$KIT/repo" && cp -r .whl/kit "$KIT/kit"
  tar --exclude=./.whl --exclude=./.git -cf - . | tar -xf - -C "$KIT/repo"
}

start_runs() {
  # The runs of RUNS (or RUNS_FILE, or .whl/kit/runs), one after the other in a detached driver, their logs
  # numbered after $1; none where the kit's specs came from other code than the repository's (rehearsal/kit_source.py).
  python3 -m rehearsal.kit_source check "$KIT/kit" || exit 3
  if [ -z "${RUNS:-}" ]; then
    if [ -n "${RUNS_FILE:-}" ]; then RUNS=$(cat "$RUNS_FILE") || exit 3
    elif [ -f .whl/kit/runs ]; then RUNS=$(cat .whl/kit/runs); fi
  fi
  printf '%s\n' "${RUNS:-$DEFAULT_RUNS}" > "$RES/runs"
  cat > "$RES/driver.sh" <<EOF
#!/usr/bin/env bash
cd $KIT/repo
n=$1
while IFS= read -r args; do
  case "\$args" in ''|'#'*) continue ;; esac
  n=\$((n + 1))
  echo "run \$n: \$args" > $RES/STATE
  case "\$args" in
  cmd:*) bash -c "\${args#cmd:}" > $RES/rehearsal-\$n.log 2>&1 < /dev/null ;;
  *) python3 -m rehearsal.run --target gpu --save-logs $RES/logs-\$n \$args > $RES/rehearsal-\$n.log 2>&1 < /dev/null ;;
  esac
  echo "run \$n exit \$?" >> $RES/rehearsal-\$n.log
done < $RES/runs
echo "ALL DONE (\$n runs)" > $RES/STATE
EOF
  chmod +x "$RES/driver.sh"
  setsid nohup "$RES/driver.sh" > "$RES/driver.log" 2>&1 < /dev/null &
  echo "[$(el) s] started: $(grep -cvE '^(#|$)' "$RES/runs") run(s) after $1; poll with: tools/gpu/device.sh poll"
}

case "$mode" in
stage)
  n="$2"
  cp ".whl/p$n/wheels.tar.part$n" "$W/" && sha256sum "$W/wheels.tar.part$n"
  if [ "$n" = 0 ]; then
    {
      echo "== probe $(date -u)"; nproc; free -g | head -2; df -h /tmp | tail -1
      nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
      python3 -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda)"
      ls /sys/class/infiniband 2>/dev/null || echo "no RDMA devices"
      # UCX serves a NIXL READ over cuda_ipc only where NVML reports active NVLinks (its ENABLE_GET_ZCOPY=auto).
      echo "nvlink: $(nvidia-smi nvlink -s 2>&1 | head -3 | tr '\n' ' ')"
    } 2>&1 | tee "$OUT/probe.txt"
  fi
  ;;
go)
  pieces=$(cat .whl/kit/pieces)
  last=$((pieces - 1))
  cp ".whl/p$last/wheels.tar.part$last" "$W/"
  copy_repo
  # No botocore here: make verify and the bench read the facts the CPU side cached (ray_llm_eks/adapters/botocore_facts.py).
  mkdir -p "$RAY_LLM_EKS_CACHE" && cp .whl/kit/botocore-facts-*.json "$RAY_LLM_EKS_CACHE/"
  parts=$(for i in $(seq 0 "$last"); do echo "$W/wheels.tar.part$i"; done)
  sum=$(cat $parts | sha256sum | cut -d' ' -f1)
  [ "$sum" = "$(cat .whl/kit/wheels.sha256)" ] || { echo "CHECKSUM MISMATCH: $(ls -la $W)"; exit 3; }
  rm -rf "$WHEELS" && mkdir -p "$WHEELS" && cat $parts | tar -x -C "$WHEELS"
  {
    python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$SITE" \
      "$WHEELS"/*.whl 2>&1 | grep -v "Running pip as"
    echo "[$(el) s] installed $(ls "$WHEELS" | wc -l) wheels into $SITE ($(du -sh "$SITE" | cut -f1))"
    python3 -c "import vllm, ray, nixl; from ray.serve.llm import build_pd_openai_app; print('vllm', vllm.__version__, 'ray', ray.__version__)"
    echo "[$(el) s] imports checked"
  } 2>&1 | tee "$RES/install.log"
  start_runs 0
  poll
  ;;
more)
  if ! grep -q "ALL DONE" "$RES/STATE" 2>/dev/null; then
    echo "runs still going, or none installed: $(cat "$RES/STATE" 2>/dev/null)"
    exit 3
  fi
  # The wheels stay installed; the repository and the kit are copied again so that what changed since `go` is what
  # runs (a file of one's own left in the kit's folder is gone: change a run with --engine-arg or --engine-env).
  copy_repo
  start_runs "$(find "$RES" -maxdepth 1 -name 'rehearsal-*.log' | wc -l)"
  poll
  ;;
poll) poll ;;
*)
  echo "usage: tools/gpu/device.sh stage N | go | more | poll" >&2
  exit 2
  ;;
esac
