#!/usr/bin/env bash
# On the device tool (a real GPU): soaked repeats of the agent's bench, each a process of
# its own after 20 s idle, as `fleet bench` runs it, for the repeat-interval coverage
# check (issue #31, bench/repeat_coverage.py). Reads only; changes no GPU setting.
#
#   bash bench/device_repeat.sh start 5    # detached: five repeats into /tmp/repeat
#   bash bench/device_repeat.sh collect [N] # wait up to N x 5 s, then copy to $OUT
#
# Five soaked runs outlast one device call (each 60-120 s), so they run detached and a
# second call collects them.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
dir=/tmp/repeat
case "${1:-}" in
start)
  runs=${2:-5}
  mkdir -p "$dir"
  nvidia-smi --query-gpu=index,serial,name,clocks.sm,power.draw,temperature.gpu,driver_version \
    --format=csv > "$dir/smi-before.csv"
  cat "$dir/smi-before.csv"
  setsid nohup bash -c "
    for i in \$(seq 1 $runs); do
      sleep 20
      nvidia-smi --query-gpu=temperature.gpu --format=csv,noheader > $dir/idle-\$i.txt
      python3 -m agent bench > $dir/run-\$i.jsonl 2> $dir/run-\$i.err
      echo \"run \$i rc=\$?\" >> $dir/progress.txt
    done
    echo done > $dir/done" > /dev/null 2>&1 &
  echo "started $runs repeats"
  ;;
collect)
  for _ in $(seq 1 ${2:-108}); do
    [ -f "$dir/done" ] && break
    sleep 5
  done
  cat "$dir/progress.txt" 2>/dev/null
  [ -f "$dir/done" ] || echo "not done yet: collect again"
  python3 - "$dir" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/run-*.jsonl")):
    lines = open(path).read().splitlines()
    if not lines:
        continue
    doc = json.loads(lines[-1]).get("document") or {}
    for r in doc.get("benchmarks", []):
        s = r["stats"]; flops = 2.0 * r["m"] * r["n"] * r["k"] / 1e9
        print(path.split("/")[-1], r["harness_version"], f"{r['tflops']:.1f}",
              f"trimmed {flops / s['trimmed_mean_ms']:.1f}", f"median {flops / s['median_ms']:.1f}",
              "within", r["measurement"].get("within_run_ci95"),
              "T", (r.get("soak") or {}).get("temperature_c"),
              "excluded", len(r["measurement"].get("excluded_runs") or []), r["flags"])
PY
  tar -czf "$OUT/repeat.tgz" -C "$dir" .
  ;;
*)
  echo "usage: bash bench/device_repeat.sh start N | collect" >&2; exit 2
  ;;
esac
