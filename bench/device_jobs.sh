#!/usr/bin/env bash
# Issue 37 on a lent node: the job suite (a transformer's training step and decode),
# five runs of every GPU at once and five of GPU 0 alone, each an agent process of its
# own, back to back, and an independent plain script (bench/job_reference.py: its own
# stack, one process a GPU, wall-clock timing) on the same node, at once and alone.
# Nothing is changed on the GPUs. Everything is packed into "$OUT/jobs.tgz" after each
# step, so a run cut short still brings back what it finished.
#
#   bash bench/device_jobs.sh [runs] [alone-runs] [extra agent args...]
#   FIRST_SUITE=all bash bench/device_jobs.sh 5 0   # the first run the whole agent
#   FIRST_SUITE=all FIRST_RUNS=2 bash bench/device_jobs.sh 2 0   # the first two
#   START=4 REFERENCE=0 bash bench/device_jobs.sh 2 1   # runs 4-5 (a second call), no
#                                                       # reference at once
#   CONTEND=2 bash bench/device_jobs.sh 0 0   # one more run at once while another user's
#                                             # matmuls load GPU 2 at part duty
#
# The reference runs with --gqa expand: the agent's stack widens the key-value heads with
# repeat_interleave (torchtitan's repeat_kv), and the check compares the same work.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
runs=${1:-5}
alone=${2:-5}
shift 2 2>/dev/null || true
work=$(mktemp -d)
out=${OUT:-$work}
pack() { tar -czf "$out/jobs.tgz" -C "$work" . ; }
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi -L | head -8
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,power.limit,clocks.sm --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
nvidia-smi -q > "$work/nvidia-smi-q.txt"
summary() {  # one line a result: GPU, workload, backend, tokens/s, TFLOP/s, MFU, GB/s, flags
  python3 - "$1" <<'PY'
import json, sys
doc = None
started = ended = None
for line in open(sys.argv[1]):
    event = json.loads(line)
    if event["event"] == "document":
        doc = event["document"]
    elif event.get("stage") == "job":
        started = event["elapsed_s"] if started is None else started
        ended = event["elapsed_s"]
if doc is None:
    print("  no document"); sys.exit()
for r in doc.get("jobs", []):
    extra = (f"{r['tflops']:.1f} TFLOP/s MFU {r['mfu'] or 0:.3f}" if r["workload"] == "train"
             else f"{r['gbs']:.0f} GB/s {r['hbm_share'] or 0:.3f} of HBM")
    soak = r["soak"] or {}
    flags = ",".join(k for k, v in r["flags"].items() if v)
    print(f"  GPU {r['gpu_index']} {r['workload']:6} {r['attention']:5} "
          f"{r['tokens_per_s']:10.1f} tok/s {extra} mem {r['peak_memory_bytes'] / 2**30:.1f} GiB "
          f"soaked {soak.get('soaked')} at {soak.get('settled_s')} {flags}")
for e in doc["errors"]:
    print("  error:", e["message"][:300])
if any(e["stage"] == "job" for e in doc["errors"]) or not doc.get("jobs"):
    sys.exit(3)
print(f"  job stage {started} -> {ended} s: {ended - started if started is not None else None} s")
PY
}
# The reference: training with the key-value heads widened as the agent widens them
# (--gqa expand); decode with them as they are (auto: enable_gqa), as the agent's decode
# attends a group's queries as one block: neither copies the cache.
reference() {
  name=$1; shift
  python3 bench/job_reference.py "$@" --workload train --gqa expand --warmup-s 15 --seconds 8 \
    > "$work/reference-$name.jsonl" 2> "$work/reference-$name.err"
  echo "reference $name train rc=$?"
  python3 bench/job_reference.py "$@" --workload decode --gqa auto --warmup-s 5 --seconds 5 \
    >> "$work/reference-$name.jsonl" 2>> "$work/reference-$name.err"
  echo "reference $name decode rc=$?"
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print('  ref GPU', r['gpu'], r['workload'], round(r['tokens_per_s'], 1), 'tok/s', r.get('gqa'),
          round(r.get('tflops') or r.get('gbs') or 0, 1))" "$work/reference-$name.jsonl"
  pack
}
start=${START:-1}
for i in $(seq "$start" $((start + runs - 1))); do
  t0=$(date +%s.%N)
  suite=job
  [ "$i" -lt $((start + ${FIRST_RUNS:-1})) ] && suite=${FIRST_SUITE:-job}
  python3 -m agent bench --suite "$suite" "$@" > "$work/all-$i.jsonl" 2> "$work/all-$i.err"
  rc=$?
  echo "all-$i rc=$rc wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  summary "$work/all-$i.jsonl"; ok=$?
  pack
  [ $rc -eq 0 ] && [ $ok -eq 0 ] || { tail -20 "$work/all-$i.err"; exit 1; }
done
if [ "$runs" -gt 0 ] && [ "${REFERENCE:-1}" = 1 ]; then
  reference all
fi
if [ "$gpus" -gt 1 ] && [ "$alone" -gt 0 ]; then
  reference alone --gpus 0
  for i in $(seq 1 "$alone"); do
    t0=$(date +%s.%N)
    python3 -m agent bench --suite job --gpus 0 "$@" > "$work/alone-$i.jsonl" 2> "$work/alone-$i.err"
    echo "alone-$i rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
    summary "$work/alone-$i.jsonl"
    pack
  done
fi
if [ -n "${CONTEND:-}" ]; then
  # A real fault, not a simulated one: another user's work on one GPU (bf16 4096^3
  # matmuls for ~30% of the time, as a forgotten notebook or a provider's agent would),
  # run as nobody where /dev/nvidia* lets it. The agent should see it and say so; the
  # report should put it to the renter, not the provider.
  cat > "$work/contender.py" <<'PY'
import sys, time, torch
d = torch.device(f"cuda:{sys.argv[1]}")
a = torch.randn(4096, 4096, device=d, dtype=torch.bfloat16)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    t = time.time()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize(d)
    time.sleep(max(0.0, 2.3 * (time.time() - t)))
PY
  chmod -R a+rx "$work"
  as_other=()
  if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups \
      python3 -c 'import torch; torch.zeros(1, device="cuda")' 2>/dev/null; then
    as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  fi
  echo "contender on GPU $CONTEND as: ${as_other[*]:-root}"
  HOME=/tmp "${as_other[@]}" python3 "$work/contender.py" "$CONTEND" 300 &
  contender=$!
  sleep 5
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  t0=$(date +%s.%N)
  python3 -m agent bench --suite job "$@" > "$work/contended.jsonl" 2> "$work/contended.err"
  echo "contended rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  kill "$contender" 2>/dev/null; wait "$contender" 2>/dev/null
  summary "$work/contended.jsonl"
  python3 - "$work/contended.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "document":
        for r in e["document"].get("jobs", []):
            if r["contention"]:
                print("  GPU", r["gpu_index"], r["workload"], r["attention"], r["contention"])
PY
  pack
fi
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv
pack
