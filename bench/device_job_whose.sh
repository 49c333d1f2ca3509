#!/usr/bin/env bash
# Issue 44 for the job: renter-side settings that slow a job, made for real by the
# renter's own environment, each run as a user would run it
# (`python3 -m agent bench --suite job` under the setting). Where the headline falls under
# its floor (agent/rerun/job.py), the agent should run the job again without the setting in
# a child process in the same run and keep both; the report should put it to the renter.
# Nothing is changed on the GPUs. Packed into "$OUT/whose-job.tgz" after each run.
#
#   bash bench/device_job_whose.sh ["NAME=VALUE ..." ...]
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=${OUT:-$work}
pack() { tar -czf "$out/whose-job.tgz" -C "$work" . ; }
faults=("$@")
[ ${#faults[@]} -gt 0 ] || faults=("PYTORCH_NO_CUDA_MEMORY_CACHING=1" "CUDA_LAUNCH_BLOCKING=1")
cap=${SOAK_CAP_S:-60}
i=0
for fault in "${faults[@]}"; do
  i=$((i + 1))
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  env $fault python3 -m agent bench --suite job --soak-cap-s "$cap" \
    > "$work/job-fault-$i.jsonl" 2> "$work/job-fault-$i.err"
  echo "job-fault-$i ($fault) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/job-fault-$i.jsonl" <<'PY'
import json, sys
doc = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "document":
        doc = e["document"]
    elif e.get("stage") == "job" and ("short" in e["message"] or "suite:" in e["message"]
                                      or "first step" in e["message"]):
        print(f"  {e['elapsed_s']:7.1f} s", e["message"][:240])
for r in (doc or {}).get("jobs", []):
    if not r.get("headline"):
        continue
    again = r.get("rerun") or {}
    share = r.get("mfu") if r["workload"] == "train" else r.get("hbm_share")
    print(f"  GPU {r['gpu_index']} {r['workload']:6} {str(r.get('point') or ''):9} "
          f"{r['attention']:9} {r['tokens_per_s']:10.1f} tok/s share {share}; again without "
          f"{again.get('without')}: {again.get('tokens_per_s')} (floor "
          f"{again.get('floor_tokens_per_s')}, {again.get('wall_s')} s, contended "
          f"{again.get('contended')})")
for e in (doc or {}).get("errors", []):
    print("  error:", e["message"][:300])
PY
  pack
done
pack
