#!/usr/bin/env bash
# On the device tool (a real GPU): the README's first command as a user runs it, then what
# they would run next (`fleet results`, `fleet report`). Reads only; changes no GPU setting.
#
# The device has no network, so `pip install .` finds fleet's dependencies in .whl/, carried
# with the call, and numpy and scipy (50 MB of wheels, over the call's limit) in the image's
# own environment, which fleet's venv reads through a .pth file. Make .whl/ here first (it is
# ignored by git):
#   pip wheel --no-deps -w /tmp/fw . && pip download --only-binary=:all: --python-version 3.12
#     --platform manylinux_2_28_x86_64 (and the other manylinux tags) -d .whl
#     /tmp/fw/fleet-*.whl "setuptools>=69"          # then delete numpy, scipy and fleet
# The agent then runs with the image's python3 (torch), as `transport: local` picks the
# machine's python3, not the venv's. Files land in $OUT; bench/records/ keeps them.
set -u
export PYTHONUNBUFFERED=1 COLUMNS=160
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
python3 -c 'import sys, torch; print("the image python3:", sys.executable, sys.prefix,
  "torch", torch.__version__)'
image_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -m venv /tmp/venv && . /tmp/venv/bin/activate
echo "$image_site" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/image.pth"
pip install -q --no-index --find-links .whl . > "$OUT/pip.log" 2>&1
echo "pip install . rc=$?"
nvidia-smi --query-gpu=serial,name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "== fleet probe inventory/local.yaml --report $OUT/fleet-report.html"
/usr/bin/time -f "fleet probe wall %e s" \
  fleet probe inventory/local.yaml --report "$OUT/fleet-report.html" 2>&1 | tee "$OUT/probe.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/probe.log"
echo "== fleet results"
fleet results
echo "== fleet results --json"
fleet results --json | python3 -c '
import json, sys
rows = json.load(sys.stdin)
print(json.dumps(rows, indent=1)[:6000])'
fleet report --format md -o "$OUT/fleet-report.md"; echo "report md rc=$?"
if [ "${1:-}" = "--pinned-offline" ]; then
  # The pinned runtime on a GPU host that reaches no index (the device reaches nothing):
  # the host's driver picks the build, and the host fails at stage runtime, saying why.
  sed 's/use: host/use: pinned/' inventory/local.yaml > /tmp/pinned.yaml
  echo "== fleet probe /tmp/pinned.yaml (use: pinned, no network)"
  timeout 300 fleet probe /tmp/pinned.yaml --json > "$OUT/pinned.json" 2> "$OUT/pinned.err"
  echo "rc=$?"; tail -n 5 "$OUT/pinned.err"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps(r["hosts"], indent=1)[:3000])' "$OUT/pinned.json"
  fleet runtime show /tmp/pinned.yaml; fleet runtime remove /tmp/pinned.yaml; echo "remove rc=$?"
fi
cp ~/.local/share/fleet/fleet.db "$OUT/fleet.db"
