#!/usr/bin/env bash
# Issue 45: which decode bandwidth point reads the most of the GPU's own memory copy, on
# the card this runs on. The agent's node suite gives the copy (the same figure the job
# suite's copy_share divides by); the independent plain script (bench/job_reference.py)
# gives decode GB/s at each shape (weights + KV cache bytes a step), one backend each;
# nvidia-smi samples power and SM clock during each shape. Nothing is changed on the GPU.
#
#   bash bench/device_decode_shapes.sh ["B:CTX:BACKEND ..."]
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d)}
shapes=${1:-"128:4096:cudnn 128:8192:cudnn 64:8192:cudnn 256:4096:cudnn 32:16384:cudnn 128:8192:flash"}
nvidia-smi -L
nvidia-smi --query-gpu=index,name,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem --format=csv
python3 -m agent bench --suite node --gpus 0 > "$out/node.jsonl" 2> "$out/node.err"
python3 - "$out/node.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "document":
        for r in e["document"].get("node", []):
            if r["kind"] == "memory_copy":
                print(f"GPU {r['gpu_index']} memory copy {r['gbs']:.1f} GB/s")
PY
for point in $shapes; do
  IFS=: read -r batch context backend <<< "$point"
  nvidia-smi --query-gpu=power.draw,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader \
    -i 0 -lms 500 > "$out/smi-$batch-$context-$backend.csv" &
  smi=$!
  python3 bench/job_reference.py --gpus 0 --workload decode --attention "$backend" --gqa auto \
    --decode-batch "$batch" --context "$context" --warmup-s 4 --seconds 5 \
    >> "$out/decode.jsonl" 2>> "$out/decode.err"
  rc=$?
  kill $smi; wait $smi 2>/dev/null
  python3 - "$out/decode.jsonl" "$out/smi-$batch-$context-$backend.csv" "$rc" <<'PY'
import json, statistics, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1]) if sys.argv[3] == "0" else {}
rows = [l.split(",") for l in open(sys.argv[2]) if l.strip()]
power = [float(x[0].split()[0]) for x in rows[len(rows)//2:]]
sm = [float(x[1].split()[0]) for x in rows[len(rows)//2:]]
print(f"b{r.get('batch')} ctx{r.get('context')} {r.get('attention')}: "
      f"{r.get('tokens_per_s', 0):.0f} tok/s {r.get('gbs', 0):.1f} GB/s; "
      f"power median {statistics.median(power) if power else 0:.0f} W, SM {statistics.median(sm) if sm else 0:.0f} MHz (rc {sys.argv[3]})")
PY
done
tail -3 "$out/decode.err"
