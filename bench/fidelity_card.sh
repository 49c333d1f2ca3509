#!/usr/bin/env bash
# On the device tool (one real GPU): the default harness through the agent, as `fleet
# bench` runs it (with --burst, the burst figure too), then the fidelity bench (its short
# graph reference in each repeat's slot included; --also-flush-always adds the previous
# default). Reads only; changes no GPU setting. Files land in $OUT; bench/RESULTS.md quotes
# them and bench/records/ keeps them.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
Q='--query-gpu=serial,name,clocks.sm,power.draw,temperature.gpu,power.limit,driver_version'
nvidia-smi "$Q" --format=csv > "$OUT/smi-before.csv"
echo "== python3 -m agent bench (the default harness, every GPU)"
/usr/bin/time -f "agent wall %e s" python3 -m agent bench > "$OUT/bench.jsonl" 2> "$OUT/bench.err"
echo "rc=$?"; tail -n 1 "$OUT/bench.err"
files="$OUT/bench.jsonl"
flush_always=""
[ "${1:-}" = "--also-flush-always" ] && { flush_always="--also-flush-always"; shift; }
if [ "${1:-}" = "--burst" ]; then
  echo "== python3 -m agent bench --pause-ms 50 (burst)"
  python3 -m agent bench --pause-ms 50 > "$OUT/burst.jsonl" 2> "$OUT/burst.err"
  echo "rc=$?"; files="$files $OUT/burst.jsonl"
fi
python3 - $files <<'PY'
import json, sys
for path in sys.argv[1:]:
    lines = open(path).read().splitlines()
    for line in lines[:-1]:
        print("  ", json.loads(line)["message"])
    d = json.loads(lines[-1])["document"]
    for r in d["benchmarks"]:
        s, t, m = r["stats"], r["telemetry"], r["measurement"]
        f = 2.0 * r["m"] * r["n"] * r["k"] / 1e9
        print(f"{r['mode']} GPU {r['gpu_index']} harness {r['harness_version']} "
              f"{r['tflops']:.1f} TFLOP/s ({r['statistic']}), interval {m['tflops_ci95']}, "
              f"median-based {f / s['median_ms']:.1f}, cv {s['cv'] * 100:.2f}% over "
              f"{s['runs']} runs, {r['warmup']['state']} after {r['warmup']['seconds']} s, "
              f"measured {m['seconds']} s, SM {t['sm_clock_mhz_median']} MHz "
              f"{t['power_w_median']} W, flags {[k for k, v in r['flags'].items() if v]}, "
              f"l2: {r['provenance']['l2_flush']}, wall {r['wall_s']} s")
    print("errors", d["errors"])
PY
echo "== bench/harness_fidelity.py $flush_always"
python3 bench/harness_fidelity.py $flush_always --out "$OUT/fidelity.json" \
  > "$OUT/fidelity.log" 2>&1
echo "rc=$?"
nvidia-smi "$Q" --format=csv > "$OUT/smi-after.csv"
gzip -f "$OUT/fidelity.json"
cat "$OUT/smi-before.csv" "$OUT/smi-after.csv"
tail -n 12 "$OUT/fidelity.log"
