#!/usr/bin/env bash
# Issue 44 on a lent node of two GPUs or more: a pair's copy and a host copy measured again
# without the run's settings (agent/rerun/links.py), run for real.
#
# Per settings list (the arguments, else $SETTING, else CUDA_LAUNCH_BLOCKING=1):
#   1. `python3 -m agent bench --suite node` under it against the committed floors;
#   2. where no pair or no pinned host copy was measured again (a healthy node is not
#      short), the same run with the pair and host-copy floors of this run's copy of
#      agent/node/floors.json made from what run 1 measured under the setting: each
#      figure's floor RAISE times it (default 1.05), keyed to this node's variant, link
#      and NVLink links, so that run 2 falls short and its rerun without the setting
#      clears the floor only where the setting costs more than that.
# Printed per run: each pair's and pinned host copy's figure, its rerun (without what, the
# figure, the child's wall time, the settings the child ran with), the agent's "short"
# progress line and how long the rerun step held the suite, and any error. The floors
# file is put back after each raised run. Nothing is changed on the GPUs (no clocks,
# power limits, persistence mode or reset). Everything lands in "$OUT/links-whose.tgz".
#
#   bash bench/device_links_whose.sh                                  # CUDA_LAUNCH_BLOCKING=1
#   SETTING="CUDA_DEVICE_MAX_CONNECTIONS=1" RAISE=1.03 bash bench/device_links_whose.sh
#   bash bench/device_links_whose.sh "CUDA_LAUNCH_BLOCKING=1" "CUDA_DEVICE_MAX_CONNECTIONS=1"
#
# Which setting moves a copy is measured here, not assumed: the suite times every copy
# with its own pair of CUDA events, so a setting that only delays launches (blocking
# launches) may cost a lone copy little, while the pair's both-ways figure, two copies
# meant to run at once on two streams, is the likeliest to show it. CUDA_MODULE_LOADING
# and CUDA_VISIBLE_DEVICES move nothing (agent/source/settings.py: not suspects).
# About 35 s a run on a lent 2x H100 (the all-reduce's ranks included); one setting, two
# runs: under 2 minutes.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=${OUT:-$work}
mkdir -p "$out"
pack() { tar -czf "$out/links-whose.tgz" -C "$work" . ; }
cp agent/node/floors.json "$work/floors.committed.json"
restore() { cp "$work/floors.committed.json" agent/node/floors.json; }
trap restore EXIT
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=("${SETTING:-CUDA_LAUNCH_BLOCKING=1}")
nvidia-smi -L | tee "$work/gpus.txt"
nvidia-smi topo -m > "$work/topo.txt" 2>&1 || true
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" \
    | tee "$work/stack.txt"

one() {  # name, settings
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  env $2 python3 -m agent bench --suite node > "$work/$1.jsonl" 2> "$work/$1.err"
  rc=$?
  echo "$1 ($2) rc=$rc wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/$1.jsonl" <<'PY'
import json, sys
doc, events = None, []
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    e = json.loads(line)
    if e.get("event") == "document":
        doc = e["document"]
    elif e.get("event") == "progress":
        events.append(e)
for i, e in enumerate(events):
    message = e.get("message", "")
    if e.get("stage") == "node" and (" short (" in message or "again" in message):
        after = events[i + 1]["elapsed_s"] if i + 1 < len(events) else None
        held = f" (the suite's next step {after - e['elapsed_s']:.1f} s later)" \
            if after is not None else ""
        print(f"  progress at {e['elapsed_s']} s: {message[:400]}{held}")
if doc is None:
    print("  no document")
    sys.exit(3)
for r in doc["node"]:
    if r["kind"] == "peer_copy":
        name = f"pair {r['gpu_index']}-{r['peer_index']} {r['direction']}"
        extra = f"{r.get('nvlink_links')} links {r.get('nvlink_fabric')}, {r.get('topology')}"
    elif r["kind"] in ("host_to_device", "device_to_host") and r.get("memory") == "pinned":
        link = r.get("link") or {}
        name = f"GPU {r['gpu_index']} {r['kind']} pinned"
        extra = f"Gen{link.get('gen')} x{link.get('width')}, cpus {r.get('cpus')}"
    elif r["kind"] == "memory_copy" and r.get("rerun"):
        name, extra = f"GPU {r['gpu_index']} memory copy", ""
    else:
        continue
    again = r.get("rerun") or {}
    said = (f"; again without {' '.join(again['without'])}: {again['gbs']:.1f} GB/s "
            f"({again['gbs'] / r['gbs'] - 1:+.1%}), floor {again['floor_gbs']:g}, child "
            f"{again['wall_s']} s, ran_with {again['ran_with']}" if again
            else "; not measured again")
    seen = "; CONTENDED" if r.get("contention") else ""
    print(f"  {name} {r['gbs']:.1f} GB/s (cv {r['stats']['cv']:.3f}; {extra}){said}{seen}")
for e in doc["errors"]:
    print("  error:", e.get("message", "")[:400])
print("  settings recorded:", ", ".join(f"{s['name']}={s.get('value')}"
                                        for s in doc.get("settings") or []) or "none")
PY
  pack
}

reran() {  # jsonl -> "pair host" flags, 1 where some such figure carries a rerun
  python3 - "$1" <<'PY'
import json, sys
doc = None
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line)
        if e.get("event") == "document":
            doc = e["document"]
node = (doc or {}).get("node", [])
pair = any(r.get("rerun") for r in node if r["kind"] == "peer_copy")
host = any(r.get("rerun") for r in node if r["kind"] in ("host_to_device", "device_to_host"))
print(int(pair), int(host))
PY
}

i=0
for settings in "${runs[@]}"; do
  i=$((i + 1))
  one "run-$i-committed" "$settings"
  read -r pair host <<< "$(reran "$work/run-$i-committed.jsonl")"
  if [ "$pair" = 1 ] && [ "$host" = 1 ]; then
    continue  # short for real under the committed floors: nothing to raise
  fi
  python3 - "$work/run-$i-committed.jsonl" "${RAISE:-1.05}" "$pair" "$host" <<'PY'
import json, sys
doc = None
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line)
        if e.get("event") == "document":
            doc = e["document"]
if doc is None:
    sys.exit("run 1 left no document: nothing to raise the floors from")
raise_by, pair_done, host_done = float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
variants = {g["index"]: (g.get("variant") or {}).get("label") for g in doc["gpus"]}
path = "agent/node/floors.json"
table = json.load(open(path))
pairs, hosts = {}, {}
for r in doc["node"]:
    variant = str(variants.get(r.get("gpu_index")))
    if r["kind"] == "peer_copy" and not pair_done:
        key = (variant, r["direction"], r["size_bytes"], r.get("nvlink_fabric"),
               r.get("nvlink_links"))
        pairs[key] = max(pairs.get(key, 0.0), r["gbs"])
    elif (r["kind"] in ("host_to_device", "device_to_host") and r.get("memory") == "pinned"
          and not host_done):
        link = r.get("link") or {}
        key = (variant, r["kind"], r["size_bytes"], link.get("gen"), link.get("width"))
        hosts[key] = max(hosts.get(key, 0.0), r["gbs"])
# Entries for this node alone, the highest figure of each kind times RAISE: every pair
# and GPU of that kind falls under it in run 2 unless the run moves by more than that.
if pairs:
    table["peer_copy"] = [
        {"variant": v, "direction": d, "size_bytes": s, "nvlink_fabric": f, "nvlink_links": n,
         "expected_gbs": round(g * raise_by, 3), "floor_gbs": round(g * raise_by, 3),
         "records": ["raised on the lent copy"]} for (v, d, s, f, n), g in pairs.items()]
if hosts:
    table["host_copy"] = [
        {"variant": v, "kind": k, "memory": "pinned", "size_bytes": s, "link_gen": gen,
         "link_width": width, "expected_gbs": round(g * raise_by, 3),
         "floor_gbs": round(g * raise_by, 3), "records": ["raised on the lent copy"]}
        for (v, k, s, gen, width), g in hosts.items()]
json.dump(table, open(path, "w"), indent=1, sort_keys=True)
for entry in (table["peer_copy"] if pairs else []) + (table["host_copy"] if hosts else []):
    what = entry.get("direction") or entry.get("kind")
    print(f"floor raised on the lent copy: {entry['variant']} {what} "
          f"{entry['floor_gbs']:g} GB/s ({raise_by:g} x run 1's highest)")
PY
  cp agent/node/floors.json "$work/floors.run-$i-raised.json"
  one "run-$i-raised" "$settings"
  restore
done
pack
echo "packed: $out/links-whose.tgz"
