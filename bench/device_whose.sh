#!/usr/bin/env bash
# Issue 44 on a lent multi-GPU node: renter-side faults fleet was never taught, made for
# real by the renter's own environment (NCCL settings the agent inherits), each run as a
# user would run it: `python3 -m agent bench --suite node` under the setting. The agent
# should see its all-reduce short, measure it again without the setting in the same run
# and keep both; the report should put it to the renter, not the provider. A healthy run
# first. Nothing is changed on the GPUs. Packed into "$OUT/whose.tgz" after each run.
#
#   bash bench/device_whose.sh ["NAME=VALUE ..." ...]
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=${OUT:-$work}
pack() { tar -czf "$out/whose.tgz" -C "$work" . ; }
faults=("$@")
[ ${#faults[@]} -gt 0 ] || faults=("NCCL_MAX_NCHANNELS=1" "NCCL_PROTO=LL" "NCCL_BUFFSIZE=65536" "NCCL_ALGO=Tree")
one() {
  name=$1; shift
  t0=$(date +%s.%N)
  env "$@" python3 -m agent bench --suite node > "$work/$name.jsonl" 2> "$work/$name.err"
  echo "$name ($*) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/$name.jsonl" <<'PY'
import json, sys
doc = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "document":
        doc = e["document"]
    elif e.get("stage") == "node" and ("short" in e["message"] or "again" in e["message"]):
        print("  ", e["message"][:200])
for r in (doc or {}).get("node", []):
    if r["kind"] == "allreduce":
        again = r.get("rerun") or {}
        print(f"  all-reduce {r['size_bytes'] >> 20} MiB {r['gbs']:.1f} GB/s; again without "
              f"{again.get('without')}: {again.get('gbs')} (floor {again.get('floor_gbs')}, "
              f"{again.get('wall_s')} s)")
for e in (doc or {}).get("errors", []):
    print("  error:", e["message"][:300])
PY
  pack
}
one healthy
i=0
for fault in "${faults[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  one "fault-$i" $fault
done
pack
