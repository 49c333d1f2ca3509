#!/usr/bin/env bash
# Issue 45 on a lent node: the job suite 1.1.0 (every attention backend gated and timed,
# GQA native, decode at a bandwidth point and a latency point), run N times, the first
# with the whole agent (--suite all: the matmul, the job, the node suite, so that decode's
# share of the GPU's own memory copy is read in the same run), the rest --suite job; and
# an independent plain script (bench/job_reference.py: its own stack, one process a GPU,
# wall-clock timing) on the same cards for the headline backends and both decode points.
# Nothing is changed on the GPUs. Everything is packed into "$OUT/figures.tgz" after each
# step, so a run cut short still brings back what it finished.
#
#   bash bench/device_job_figures.sh [runs] [reference: 1|0]
#   START=3 bash bench/device_job_figures.sh 3 0   # runs 3-5, job suite only, no reference
#   FIRST_SUITE=job COPY=1 REF_TRAIN= bash bench/device_job_figures.sh 5 1
#       # five job-suite runs, then the node suite for the copies, then the script's decode
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
runs=${1:-1}
ref=${2:-1}
work=$(mktemp -d)
out=${OUT:-$work}
pack() { tar -czf "$out/figures.tgz" -C "$work" . ; }
nvidia-smi -L | head -8
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,power.limit,clocks.sm --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
summary() {
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
    print("  no document"); sys.exit(3)
for r in doc.get("jobs", []):
    if r["workload"] == "train":
        extra = f"MFU {r['mfu'] or 0:.3f}"
    else:
        extra = (f"{r['gbs']:.0f} GB/s hbm {r['hbm_share'] or 0:.3f} copy "
                 f"{r.get('copy_share') or 0:.3f}")
    flags = ",".join(k for k, v in r["flags"].items() if v)
    print(f"  GPU {r['gpu_index']} {r['workload'][:3]} {str(r.get('point') or '')[:3]:3} "
          f"{r['attention']:9} {r['gqa'][:3]} {'H' if r['headline'] else ' '} "
          f"{r['tokens_per_s']:10.1f} {extra} {flags}")
for e in doc["errors"]:
    print("  error:", e["message"][:300])
for r in doc.get("node", []):
    if r["kind"] == "memory_copy":
        print(f"  GPU {r['gpu_index']} memory copy {r['gbs']:.0f} GB/s")
if not doc.get("jobs"):
    sys.exit(3)
print(f"  job stage {started} -> {ended}: {ended - started if started is not None else None} s")
PY
}
reference() {
  # Training with GQA native (enable_gqa, as the agent now runs it), each backend; decode
  # at both points, each backend; all GPUs at once.
  for backend in ${REF_TRAIN-flash cudnn}; do
    python3 bench/job_reference.py --workload train --attention "$backend" --gqa native \
      --warmup-s 10 --seconds 6 >> "$work/reference.jsonl" 2>> "$work/reference.err"
    echo "reference train $backend rc=$?"
  done
  for point in ${REF_DECODE-128:8192:cudnn 128:8192:flash 1:4096:flash}; do
    IFS=: read -r batch context backend <<< "$point"
    python3 bench/job_reference.py --workload decode --attention "$backend" --gqa auto \
      --decode-batch "$batch" --context "$context" --warmup-s 3 --seconds 4 \
      >> "$work/reference.jsonl" 2>> "$work/reference.err"
    echo "reference decode b$batch ctx$context $backend rc=$?"
  done
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print('  ref GPU', r['gpu'], r['workload'], r.get('attention'), r.get('gqa'),
          r.get('batch'), r.get('context'), round(r['tokens_per_s'], 1), 'tok/s',
          round(r.get('gbs') or r.get('tflops') or 0, 1))" "$work/reference.jsonl"
  pack
}
start=${START:-1}
for i in $(seq "$start" $((start + runs - 1))); do
  t0=$(date +%s.%N)
  suite=job
  [ "$i" = 1 ] && suite=${FIRST_SUITE:-all}
  python3 -m agent bench --suite "$suite" > "$work/run-$i.jsonl" 2> "$work/run-$i.err"
  rc=$?
  echo "run-$i ($suite) rc=$rc wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  summary "$work/run-$i.jsonl"
  pack
  [ $rc -eq 0 ] || { tail -20 "$work/run-$i.err"; }
done
if [ "${COPY:-0}" = 1 ]; then
  # The GPUs' own memory copies, for the decode figures' share when the runs were --suite job.
  python3 -m agent bench --suite node > "$work/node.jsonl" 2> "$work/node.err"
  echo "node suite rc=$?"
  summary "$work/node.jsonl"
  pack
fi
[ "$ref" = 1 ] && reference
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv
pack
