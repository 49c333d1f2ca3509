#!/usr/bin/env bash
# On the device tool (a real multi-GPU node): the product checked bit for bit under load
# (issue 36 item 5, agent/matmul/integrity.py). Reads only; changes no GPU setting.
#
#   bash bench/device_integrity.sh        # ~4 minutes on 2 H100s; files into $OUT
#
# 1. `python3 -m agent bench --suite gemm`, soaked, every GPU at once: each GPU's
#    integrity record (checks, mismatches, the first one's seconds, temperature and
#    elements) and its first product's digest; the GPUs of one device and stack should
#    all share one digest (said at the end: "all equal" or the groups).
# 2. `python3 bench/integrity_cost.py`: TFLOP/s without and with the checks, alternating
#    10-s blocks after a 20-s warm-up, and the comparison's own GPU time from CUDA events.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/integrity}
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,temperature.gpu,power.limit,driver_version \
  --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
python3 -m agent bench --suite gemm > "$out/bench.jsonl" 2> "$out/bench.err"
echo "agent bench rc=$?"
python3 - "$out/bench.jsonl" <<'PY'
import json, sys
from collections import defaultdict
lines = open(sys.argv[1]).read().splitlines()
doc = json.loads(lines[-1]).get("document") or {} if lines else {}
groups = defaultdict(list)
for r in doc.get("benchmarks", []):
    i, p = r.get("integrity"), r["provenance"]
    print(f"GPU {r['gpu_index']} {r['tflops']:.1f} TFLOP/s soaked={r['soak']['soaked'] if r.get('soak') else None}"
          f" T={(r.get('soak') or {}).get('temperature_c')} integrity={json.dumps(i)}")
    if i:
        key = (p["device_name"], p["sm_count"], p["torch_version"], p["cuda_runtime_version"],
               p["cublas_version"], r["dtype"], r["m"])
        groups[key].append((r["gpu_index"], i["digest"]))
for key, members in groups.items():
    digests = {d for _, d in members}
    print("stack", key, "->", "all equal" if len(digests) == 1 else "DIFFER", members)
for e in doc.get("errors", []):
    print("error", e)
PY
grep -i "changed under load\|error" "$out/bench.err" | tail -5
python3 bench/integrity_cost.py --out "$out/integrity_cost.json" 2> "$out/cost.err"
echo "integrity_cost rc=$?"
tail -3 "$out/cost.err"
