#!/usr/bin/env bash
# Issue 44 on a lent GPU: the memory copy measured again without the run's settings
# (agent/rerun/memory.py), run for real: `python3 -m agent bench --suite node` under
# each setting list, first against the catalog's floors as committed, then, where nothing
# was short, with the memory floors of this run's copy of agent/node/floors.json raised to
# FLOOR GB/s (the copy on the lent machine only), so that a healthy card is measured again.
# Nothing is changed on the GPUs. Packed into "$OUT/memory-whose.tgz" after each run.
#
#   FLOOR=100000 bash bench/device_memory_whose.sh ["NAME=VALUE ..." ...]
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=${OUT:-$work}
pack() { tar -czf "$out/memory-whose.tgz" -C "$work" . ; }
cp agent/node/floors.json "$work/floors.committed.json"
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=("CUDA_LAUNCH_BLOCKING=1")
nvidia-smi -L
one() {  # name, settings
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  env $2 python3 -m agent bench --suite node > "$work/$1.jsonl" 2> "$work/$1.err"
  echo "$1 ($2) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/$1.jsonl" <<'PY'
import json, sys
doc = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "document":
        doc = e["document"]
    elif e.get("stage") == "node" and ("short" in e["message"] or "again" in e["message"]):
        print("  progress:", e["elapsed_s"], e["message"][:300])
if doc is None:
    print("  no document"); sys.exit(3)
for r in doc["node"]:
    if r["kind"] != "memory_copy":
        continue
    again = r.get("rerun") or {}
    print(f"  GPU {r['gpu_index']} memory copy {r['gbs']:.1f} GB/s" + (
        f"; again without {again['without']}: {again['gbs']:.1f} GB/s, {again['wall_s']} s, "
        f"ran_with {again['ran_with']}" if again else "; not measured again"))
for e in doc["errors"]:
    print("  error:", e["message"][:300])
print("  rerun:", any(r.get("rerun") for r in doc["node"] if r["kind"] == "memory_copy"))
PY
  pack
}
i=0
for settings in "${runs[@]}"; do
  i=$((i + 1))
  one "run-$i-committed" "$settings"
  if ! grep -q '"rerun": {' "$work/run-$i-committed.jsonl"; then
    python3 - "${FLOOR:-100000}" <<'PY'
import json, sys
path = "agent/node/floors.json"
table = json.load(open(path))
for entry in table["memory_copy"]:
    entry["floor_gbs"] = float(sys.argv[1])
json.dump(table, open(path, "w"))
print("memory floors raised to", sys.argv[1], "GB/s")
PY
    one "run-$i-raised" "$settings"
    cp "$work/floors.committed.json" agent/node/floors.json
  fi
done
pack
