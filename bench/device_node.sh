#!/usr/bin/env bash
# On the device tool (real GPUs): the node suite and the health counters, as a user runs
# them (issues #32 and #30). Reads only; changes no GPU setting. Files land in $OUT;
# bench/records/ keeps them and bench/RESULTS.md quotes them.
#
#   bash bench/device_node.sh forms suite probe   # one call: what the card says, the
#                                                 # suite five times, the README's command
#   bash bench/device_node.sh sequential          # every GPU's matmul alone (--sequential)
#   bash bench/device_node.sh reference           # the continuous reference, every GPU
#
# `probe` needs .whl/ carried (bench/device_probe.sh says how to make it).
set -u
export PYTHONUNBUFFERED=1 COLUMNS=100
cd "$(dirname "$0")/.."
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi -L
nvidia-smi --query-gpu=index,serial,clocks.sm,power.draw,temperature.gpu,pcie.link.gen.current,pcie.link.width.current --format=csv
for step in "$@"; do
  case "$step" in
  forms)
    # The card's three forms (nvidia-smi -q text, -q -x XML, an NVML recording), each
    # fingerprinted as `fleet fingerprint FILE` reads it, beside the live driver.
    forms=$(mktemp -d)
    nvidia-smi -q > "$forms/nvidia-smi-q.txt"
    nvidia-smi -q -x > "$forms/nvidia-smi-q.xml"
    nvidia-smi topo -m > "$forms/nvidia-smi-topo.txt"
    python3 -m agent fingerprint --no-torch --record "$forms/nvml-recording.json" \
      > "$forms/live.jsonl"; echo "live rc=$?"
    for f in nvidia-smi-q.txt nvidia-smi-q.xml nvml-recording.json; do
      python3 -m agent fingerprint --no-torch --source "$forms/$f" > "$forms/$f.jsonl"
      echo "$f rc=$?"
    done
    python3 - "$forms" <<'PY'
import json, sys
forms = sys.argv[1]
def gpus(name):
    return json.loads(open(f"{forms}/{name}").read().splitlines()[-1])["document"]["gpus"]
docs = {n: gpus(n) for n in ("live.jsonl", "nvml-recording.json.jsonl",
                              "nvidia-smi-q.txt.jsonl", "nvidia-smi-q.xml.jsonl")}
for index in range(len(docs["live.jsonl"])):
    for name, found in docs.items():
        h = found[index].get("health") or {}
        print(f"GPU {index} {name:26} {h.get('verdict')} {h.get('reasons')}")
    # Counters that move by the second (energy, throttle time) are read at different
    # moments by the four forms: the verdict and the error counters must agree.
    kept = ("verdict", "reasons", "ecc", "remapped_rows", "retired_pages", "pcie_replays")
    healths = [json.dumps({k: (g[index].get("health") or {}).get(k) for k in kept},
                          sort_keys=True) for g in docs.values()]
    print(f"GPU {index}: the four forms' health agree: {len(set(healths)) == 1}")
    if len(set(healths)) != 1:
        for name, text in zip(docs, healths):
            print("  ", name, text)
live = docs["live.jsonl"][0].get("health") or {}
print("live counters of GPU 0:", json.dumps({k: v for k, v in live.items() if k != "rule"}))
PY
    # The call brings back at most 8 files: the forms travel as one.
    tar -czf "$OUT/forms.tgz" -C "$forms" .
    ;;
  suite)
    echo "== the node suite alone, five runs (bench/node_suite.py)"
    python3 bench/node_suite.py --runs 5 --out "$OUT/node-suite.json"
    ;;
  probe)
    echo "== the README's first command: fleet probe inventory/local.yaml"
    image_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    python3 -m venv /tmp/venv && . /tmp/venv/bin/activate
    echo "$image_site" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/image.pth"
    pip install -q --no-index --find-links .whl . > "$OUT/pip.log" 2>&1
    echo "pip install . rc=$?"
    /usr/bin/time -f "fleet probe wall %e s" fleet probe inventory/local.yaml \
      --report "$OUT/fleet-report.html" 2>&1 | tee "$OUT/probe.log"
    echo "== fleet results --node"; fleet results --node
    fleet report --format md -o "$OUT/fleet-report.md"; echo "report md rc=$?"
    cp ~/.local/share/fleet/fleet.db "$OUT/fleet.db"
    deactivate
    ;;
  sequential)
    echo "== every GPU's matmul alone: python3 -m agent bench --sequential --suite gemm"
    /usr/bin/time -f "wall %e s" python3 -m agent bench --sequential --suite gemm \
      > "$OUT/sequential.jsonl" 2> "$OUT/sequential.err"
    python3 - "$OUT/sequential.jsonl" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])["document"]
for r in d["benchmarks"]:
    s = r.get("soak") or {}
    print(f"GPU {r['gpu_index']} alone: {r['tflops']:.1f} TFLOP/s soaked={s.get('soaked')} "
          f"after {s.get('seconds')} s, first 20 s {s.get('first_20s_tflops')}, "
          f"{s.get('temperature_c')} C, SM {r['telemetry']['sm_clock_mhz_median']} MHz")
print("errors", d["errors"])
PY
    ;;
  reference)
    echo "== the continuous reference on every GPU at once (bench/node_reference.py)"
    python3 bench/node_reference.py --gpus "$gpus" --seconds 180 --late-s 90 \
      --out "$OUT/reference.json"
    ;;
  esac
done
nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv
