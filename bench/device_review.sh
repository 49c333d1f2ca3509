#!/usr/bin/env bash
# On the device tool (a real GPU), two changes of the agent's GPU path from the review of
# 2026-11-29, read only (nothing set on the GPU):
#  1. a process NVML lists is "visible" only where /proc shows that pid holding an NVIDIA
#     device open (agent/timing/contention.py holds_a_gpu): a holder of 8 GiB started by
#     the same user, then `python3 -m agent fingerprint`, each GPU's processes printed;
#  2. the compiled training step with static shapes (agent/job/transformer.py
#     compile_layers, dynamic=False): `python3 -m agent bench --suite job --job-compile`
#     from idle, with Dynamo's recompile log, each training figure and the compile time.
#   bash bench/device_review.sh        (files land in $OUT; bench/records/ keeps them)
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=index,name,memory.used,temperature.gpu,power.draw --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"

echo "== 1. a holder of 8 GiB on GPU 0, then the fingerprint"
python3 - <<'PY' &
import time, torch
held = torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda:0")
held.fill_(1)
torch.cuda.synchronize()
open("/tmp/held", "w").write("ok")
time.sleep(120)
PY
holder=$!
for _ in $(seq 1 60); do [ -f /tmp/held ] && break; sleep 1; done
echo "holder pid $holder; its /dev/nvidia files: $(ls -l /proc/$holder/fd 2>/dev/null | grep -c /dev/nvidia)"
python3 -m agent fingerprint > "$OUT/fingerprint.jsonl" 2> "$OUT/fingerprint.err"
echo "fingerprint rc=$?"
kill "$holder"; wait "$holder" 2>/dev/null
python3 - "$OUT/fingerprint.jsonl" "$holder" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    item = json.loads(line)
    for gpu in item.get("document", {}).get("gpus", []):
        print("GPU", gpu["index"], "memory_used_mib", gpu.get("memory_used_mib"),
              "processes", json.dumps(gpu.get("processes")))
print("holder pid", sys.argv[2])
PY

echo "== 2. the job suite with the compiled step, from idle"
t0=$(date +%s)
TORCH_LOGS=recompiles python3 -m agent bench --suite job --job-compile \
  > "$OUT/job.jsonl" 2> "$OUT/job.err"
echo "job rc=$? wall $(( $(date +%s) - t0 )) s"
echo "recompiles logged: $(grep -c 'Recompiling' "$OUT/job.err")"
grep -m3 -A2 'Recompiling' "$OUT/job.err" | cut -c1-200
python3 - "$OUT/job.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    item = json.loads(line)
    doc = item.get("document")
    if not doc:
        continue
    for j in doc.get("jobs", []):
        if j["workload"] == "train":
            print(f"train {j['attention']:9} compiled={j.get('compiled')} "
                  f"headline={j.get('headline')} tokens/s {j['tokens_per_s']:,.0f} "
                  f"compile_s {j.get('compile_s')} gate {json.dumps(j.get('correctness'))[:160]}")
    for e in doc.get("errors", []):
        print("error", e["stage"], e["message"][:300])
PY
