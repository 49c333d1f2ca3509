#!/usr/bin/env bash
# Issue 44 on a lent GPU: the soaked matmul's pair (agent/rerun/matmul.py) run for real.
# A healthy card is never short, so the floors in this run's copy of agent/node/floors.json
# are raised to FLOOR TFLOP/s (the copy on the lent machine only: the committed file is
# the catalog's): every soaked figure is then short, and the agent measures it again,
# quick on the hot card, without the run's settings that can move a matmul, then with
# them. Each setting list below is one run, `python3 -m agent bench --suite gemm` under
# it, as a user would run it. Nothing is changed on the GPUs. Packed into
# "$OUT/matmul-whose.tgz" after each run.
#
#   FLOOR=1000 AGENT_ARGS="--soak-cap-s 60" bash bench/device_matmul_whose.sh ["NAME=VALUE ..." ...]
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=${OUT:-$work}
pack() { tar -czf "$out/matmul-whose.tgz" -C "$work" . ; }
python3 - "${FLOOR:-1000}" <<'PY'
import json, sys
path = "agent/node/floors.json"
table = json.load(open(path))
for entry in table["matmul"]:
    entry["floor_tflops"] = float(sys.argv[1])
json.dump(table, open(path, "w"))
print("floors raised to", sys.argv[1], "TFLOP/s for", [e["variant"] for e in table["matmul"]])
PY
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=("CUBLAS_WORKSPACE_CONFIG=:4096:8 CUDA_LAUNCH_BLOCKING=1")
nvidia-smi -L
i=0
for settings in "${runs[@]}"; do
  i=$((i + 1))
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  env $settings python3 -m agent bench --suite gemm ${AGENT_ARGS:-} > "$work/run-$i.jsonl" 2> "$work/run-$i.err"
  echo "run-$i ($settings) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/run-$i.jsonl" <<'PY'
import json, sys
doc = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "document":
        doc = e["document"]
    elif e.get("stage") == "benchmark" and ("short" in e["message"] or "again" in e["message"]):
        print("  progress:", e["elapsed_s"], e["message"][:300])
if doc is None:
    print("  no document"); sys.exit(3)
for b in doc["benchmarks"]:
    pair = b.get("rerun") or {}
    print(f"  GPU {b['gpu_index']} {b['thermal']} {b['tflops']:.1f} TFLOP/s; pair: without "
          f"{pair.get('without')} {pair.get('tflops')}, with {pair.get('with_tflops')}, "
          f"cost {1 - pair['with_tflops'] / pair['tflops']:+.2%}, {pair.get('wall_s')} s, "
          f"ran_with {pair.get('ran_with')}, contended {pair.get('contended')}"
          if pair else f"  GPU {b['gpu_index']} {b['tflops']:.1f}: no pair")
for e in doc["errors"]:
    print("  error:", e["message"][:300])
print("  settings:", [(s["name"], s["value"]) for s in doc["settings"] or []])
PY
  pack
done
git checkout -- agent/node/floors.json 2>/dev/null || true
pack
