#!/usr/bin/env bash
# On the device tool (a real GPU): issue 54 as a user meets it. `pip install .` (the wheel,
# non-editable) and the README's first command on the card as lent; then again with a
# process of the renter's own holding most of the card's memory from before the
# fingerprint, as on the lent 4x H200 of issue 54 (131 GiB of GPU 2), and what ingest's
# line, the report, `fleet results` and the metrics say of the GPU whose job could not run.
# Reads only; changes no GPU setting (the holder only allocates memory, then exits).
#
# The device has no network: fleet's dependencies come from .whl/, carried with the call
# (bench/device_probe.sh says how to make it), numpy, scipy and pandas from the image's
# own environment through a .pth file. Files land in $OUT; bench/records/ keeps them.
#   HOLD_GIB=131 HOLD_GPU=1 bash bench/device_installed.sh
set -u
export PYTHONUNBUFFERED=1 COLUMNS=80
hold_gib=${HOLD_GIB:-131}
hold_gpu=${HOLD_GPU:-1}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
image_site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -m venv /tmp/venv && . /tmp/venv/bin/activate
echo "$image_site" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/image.pth"
pip install -q --no-index --find-links .whl . > "$OUT/pip.log" 2>&1
echo "pip install . rc=$?"
python3 -c 'import fleet, agent.node; print("fleet from", fleet.__file__)'
nvidia-smi --query-gpu=name,memory.total,memory.used,power.limit,temperature.gpu \
  --format=csv,noheader

echo "== 1. fleet probe inventory/local.yaml (the card as lent)"
/usr/bin/time -f "probe wall %e s" fleet probe inventory/local.yaml --db /tmp/lent.db \
  --report "$OUT/lent.html" 2>&1 | tee "$OUT/lent.log"
fleet results --jobs --db /tmp/lent.db 2>&1 | head -30

echo "== 2. a renter's process holding ${hold_gib} GiB of GPU ${hold_gpu}, then the same command"
python3 - "$hold_gib" "$hold_gpu" <<'EOF' &
import sys, time, torch
held = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8,
                   device=f"cuda:{sys.argv[2]}")
held.fill_(1)  # touched, so the memory is the process's own
torch.cuda.synchronize()
open("/tmp/held", "w").write("ok")
time.sleep(900)
EOF
holder=$!
for _ in $(seq 1 120); do [ -f /tmp/held ] && break; sleep 1; done
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
/usr/bin/time -f "probe wall %e s" fleet probe inventory/local.yaml --db /tmp/held.db \
  --report "$OUT/held.html" 2>&1 | tee "$OUT/held.log"
kill "$holder"; wait "$holder" 2>/dev/null
echo "== what the store says of it"
fleet results --jobs --db /tmp/held.db 2>&1 | tail -15
fleet report --db /tmp/held.db --format md -o "$OUT/held.md" 2>&1 | tail -3
grep -A3 "^### Not measured" "$OUT/held.md"
fleet metrics --db /tmp/held.db | grep -E "^fleet_not_measured|not_measured.*} [1-9]"
python3 - <<'EOF'
import sqlite3
db = sqlite3.connect("/tmp/held.db")
body, = db.execute("select body from document order by id desc limit 1").fetchone()
open(__import__("os").environ["OUT"] + "/held-document.json", "w").write(body)
EOF
cp /tmp/lent.db "$OUT/lent.db"
