#!/usr/bin/env bash
# On the device tool (a real GPU): fingerprint it, record NVML, exercise the nvidia-smi
# fallback, run the default harness (sustained) and a burst run. Reads only; changes no
# GPU setting. Files land in $OUT; bench/RESULTS.md quotes them.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
nvidia-smi -q > "$OUT/nvidia-smi-q.txt"
nvidia-smi -q -x > "$OUT/nvidia-smi-q.xml"
python3 -c 'import pynvml, torch, sys; print(sys.version.split()[0], torch.__version__, pynvml.__file__)'
echo "== live fingerprint, recorded"
python3 -m agent fingerprint --record "$OUT/nvml-recording.json" > "$OUT/fingerprint.jsonl"
echo "rc=$?"
echo "== without pynvml (python3 -S): the nvidia-smi -q -x fallback"
python3 -S -m agent fingerprint --no-torch > "$OUT/fallback.jsonl"
echo "rc=$?"
echo "== default harness: 8192^3 bf16 sustained"
/usr/bin/time -f "wall %e s" python3 -m agent bench > "$OUT/bench.jsonl"
if [ "$(nvidia-smi -L | wc -l)" -gt 1 ]; then
  echo "== every GPU alone: --sequential"
  /usr/bin/time -f "wall %e s" python3 -m agent bench --sequential > "$OUT/sequential.jsonl"
fi
echo "== burst: --pause-ms 50"
/usr/bin/time -f "wall %e s" python3 -m agent bench --pause-ms 50 > "$OUT/burst.jsonl"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def doc(name):
    return json.loads(open(f"{out}/{name}").read().splitlines()[-1])["document"]
for name in ("fingerprint.jsonl", "fallback.jsonl"):
    d = doc(name)
    for g in d["gpus"]:
        v = g["variant"]
        print(name, d["source"]["kind"], g["name"], v["label"], v["form_factor"],
              g["virtualization_mode"], g["power_limit_w"], g["power_limit_min_w"],
              g["power_limit_max_w"], g["max_sm_clock_mhz"])
    print(name, "errors", d["errors"])
import os
for name in ("bench.jsonl", "sequential.jsonl", "burst.jsonl"):
    if not os.path.exists(f"{out}/{name}"):
        continue
    for line in open(f"{out}/{name}").read().splitlines()[:-1]:
        event = json.loads(line)
        print(f"  {event.get('elapsed_s', 0):7.2f} s {event['message']}")
    d = doc(name)
    for r in d["benchmarks"]:
        s, t = r["stats"], r["telemetry"]
        print(name, r["gpu_index"], r["mode"], r["concurrency"], f"{r['tflops']:.1f} TFLOP/s",
              f"median {s['median_ms']:.4f} ms CI {s['ci95_low_ms']:.4f}-{s['ci95_high_ms']:.4f}",
              f"cv {s['cv']*100:.2f}% runs {s['runs']}", "steady", r["warmup"]["steady"],
              f"warmup {r['warmup']['seconds']} s windows {r['warmup']['windows']}",
              "sm", t["sm_clock_mhz_median"], "W", t["power_w_median"], "T", t["temperature_c_max"],
              t["reason_shares"], {k: v for k, v in r["flags"].items() if v},
              "err", r["correctness"]["max_rel_error"], "wall", r["wall_s"],
              r["provenance"]["cublas_version"], r["provenance"]["l2_bytes"])
    print(name, "errors", d["errors"])
PY
