#!/usr/bin/env bash
# On the device tool (a lent node of two GPUs or more): the faults a renter meets, made
# for real, beside the same node healthy (issue 38). Reads only; changes no GPU setting:
# the faults are environment variables of the agent's own run and a process of our own.
#
#   bash bench/device_faults.sh        # everything below, one call, ~5 min on 2 GPUs
#
# Every document lands in $OUT/faults.tgz (the call brings back at most 8 files):
#   fingerprint.jsonl, nvml-recording.json   the live fingerprint and what NVML answered
#   healthy-{1,2,3}.jsonl                    the node suite alone, three times
#   p2p-off.jsonl                            NCCL_P2P_DISABLE=1 (a site-wide setting, or a
#                                            VM whose platform has no peer path)
#   p2p-shm-off.jsonl                        NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: NCCL
#                                            through its network transport on one host
#   foreign.jsonl                            matmul and node suite while another user's
#                                            process runs matmuls on the last GPU
#   own.jsonl                                the node suite while a process of the agent's
#                                            own user runs matmuls on GPU 0
set -u
export PYTHONUNBUFFERED=1 COLUMNS=80
cd "$(dirname "$0")/.."
work=$(mktemp -d)
gpus=$(nvidia-smi -L | wc -l)
last=$((gpus - 1))
{
  nvidia-smi -L
  nvidia-smi topo -m
  nvidia-smi nvlink -s | head -40
  env | grep -E '^(NCCL|CUDA_VISIBLE|TORCH_SYMM|NVSHMEM)' | sort
  python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && [ -e "$d/numa_node" ] &&
      echo "$(basename "$d") numa_node=$(cat "$d/numa_node") cpus=$(cat "$d/local_cpulist")"
  done
} > "$work/node.txt" 2>&1
cat "$work/node.txt"

step() {  # name, then the command; its wall time and exit status to the log
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@" > "$work/$name.jsonl" 2> "$work/$name.err"
  echo "== $name rc=$? wall=$(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
}

step fingerprint python3 -m agent fingerprint --record "$work/nvml-recording.json"
# NCCL's own INFO lines as agent/node/collective.py asks for them, healthy and with peer-to-peer
# off: the parser's test fixtures (tests/fixtures/nccl/).
cat > "$work/nccl_log.py" <<'PY'
import os, sys, torch, torch.distributed as dist
rank = int(os.environ["RANK"]); torch.cuda.set_device(rank)
dist.init_process_group("nccl")
t = torch.ones(1 << 20, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
dist.destroy_process_group()
PY
for case in healthy p2p-off; do
  extra=(); [ "$case" = p2p-off ] && extra=(NCCL_P2P_DISABLE=1)
  env "${extra[@]}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV torchrun --standalone \
    --nproc-per-node "$gpus" "$work/nccl_log.py" > "$work/nccl-$case.log" 2>&1
  echo "== nccl log $case rc=$? lines=$(wc -l < "$work/nccl-$case.log")"
done
for i in 1 2 3; do step "healthy-$i" python3 -m agent bench --suite node; done
step p2p-off env NCCL_P2P_DISABLE=1 python3 -m agent bench --suite node
step p2p-shm-off env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 python3 -m agent bench --suite node

# Another user's work on the last GPU: bf16 matmuls back to back until killed, run as
# nobody where /dev/nvidia* lets it (else as root, which the finding then says).
cat > "$work/foreign.py" <<'PY'
import sys, time, torch
d = torch.device(f"cuda:{sys.argv[1]}")
a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize(d)
PY
chmod -R a+rx "$work"
if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups \
    python3 -c 'import torch; torch.zeros(1, device="cuda")' 2>/dev/null; then
  as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
else
  as_other=()
fi
echo "foreign process as: ${as_other[*]:-root}"
HOME=/tmp "${as_other[@]}" python3 "$work/foreign.py" "$last" 400 &
foreign=$!
sleep 8
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
step foreign python3 -m agent bench --soak-cap-s 60
kill "$foreign" 2>/dev/null; wait "$foreign" 2>/dev/null
# The renter's own forgotten job: the same work as the agent's user, on the first GPU,
# the node suite alone.
python3 "$work/foreign.py" 0 120 &
own=$!
sleep 8
step own python3 -m agent bench --suite node
kill "$own" 2>/dev/null; wait "$own" 2>/dev/null

python3 - "$work" <<'PY'
import glob, json, os, sys
work = sys.argv[1]
for path in sorted(glob.glob(f"{work}/*.jsonl")):
    lines = open(path).read().splitlines()
    if not lines:
        print(os.path.basename(path), "empty"); continue
    doc = json.loads(lines[-1]).get("document") or {}
    print("##", os.path.basename(path), "errors:", [e.get("message", "")[:120] for e in doc.get("errors", [])])
    for r in doc.get("benchmarks") or []:
        print(f"  matmul GPU {r['gpu_index']}: {r['tflops']:.1f} TFLOP/s contention={r['contention']}")
    for r in doc.get("node") or []:
        if r["kind"] == "allreduce" and r["size_bytes"] < (1 << 30):
            continue
        extra = {k: r.get(k) for k in ("transport", "settings", "numa_node", "cpus",
                                       "nvlink_links", "nvlink_fabric") if r.get(k) is not None}
        print(f"  {r['kind']:15} {r.get('gpu_index')}->{r.get('peer_index')} "
              f"{r.get('direction') or r.get('memory') or ''} {r['gbs']:9.1f} GB/s "
              f"cv={r['stats']['cv']:.4f} sheet={r.get('datasheet_gbs')} "
              f"contention={r.get('contention')} {json.dumps(extra)[:400]}")
PY
tar -czf "$OUT/faults.tgz" -C "$work" .
cp "$work/node.txt" "$OUT/"
