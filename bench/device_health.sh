#!/usr/bin/env bash
# Issue 36 on a lent node: the health signals in every form, read only (no setting is
# changed, nothing is reset). Per GPU: nvidia-smi -q (text), -q -x (XML), nvlink -e; one
# NVML recording by the agent; each form fingerprinted; then whether the verdict, the
# action and the new counters agree. Everything is packed into "$OUT/health.tgz"; what is
# printed stays short (the device reply keeps the last 12,000 characters).
#
#   bash bench/device_health.sh
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
work=$(mktemp -d)
out=${OUT:-$work}
nvidia-smi -L | head -8
nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
nvidia-smi -q > "$work/nvidia-smi-q.txt"
nvidia-smi -q -x > "$work/nvidia-smi-q.xml"
nvidia-smi nvlink -e > "$work/nvidia-smi-nvlink-e.txt" 2>&1; echo "nvlink -e rc=$?"
dmesg 2>/dev/null | grep "NVRM: Xid" | tail -20 > "$work/xid.txt"; echo "Xid lines: $(wc -l < "$work/xid.txt")"
python3 -m agent fingerprint --no-torch --record "$work/nvml-recording.json" \
  > "$work/live.jsonl" 2> "$work/live.err"; echo "live rc=$?"
for f in nvidia-smi-q.txt nvidia-smi-q.xml nvml-recording.json; do
  python3 -m agent fingerprint --no-torch --source "$work/$f" > "$work/$f.jsonl" 2>> "$work/forms.err"
  echo "$f rc=$?"
done
grep -E "GPU Recovery Action|SRAM Threshold Exceeded|Channel Repair Pending|TPC Repair Pending|Unrepairable Memory" \
  "$work/nvidia-smi-q.txt" | sort | uniq -c
python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]
def gpus(name):
    return json.loads(open(f"{work}/{name}").read().splitlines()[-1])["document"]["gpus"]
docs = {n: gpus(n) for n in ("live.jsonl", "nvml-recording.json.jsonl",
                              "nvidia-smi-q.txt.jsonl", "nvidia-smi-q.xml.jsonl")}
kept = ("verdict", "action", "reasons", "ecc", "remapped_rows", "retired_pages", "pcie_replays",
        "recovery_action", "remap_histogram", "sram_threshold_exceeded",
        "channel_repair_pending", "tpc_repair_pending", "unrepairable_memory")
# nvidia-smi nvlink -e: "GPU 0: ..." then "\t Link 0: Replay Errors: 0" (one line a counter)
smi_links, gpu = {}, None
for line in open(f"{work}/nvidia-smi-nvlink-e.txt"):
    m = re.match(r"GPU (\d+):", line)
    if m:
        gpu = int(m.group(1)); continue
    m = re.match(r"\s*Link (\d+): (.+?): (\d+)\s*$", line)
    if m and gpu is not None:
        smi_links.setdefault(gpu, {}).setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
names = {"Replay Errors": "replay", "Recovery Errors": "recovery"}
for i in range(len(docs["live.jsonl"])):
    rows = {n: json.dumps({k: (g[i].get("health") or {}).get(k) for k in kept}, sort_keys=True)
            for n, g in docs.items()}
    h = docs["live.jsonl"][i].get("health") or {}
    print(f"GPU {i}: {h.get('verdict')}/{h.get('action')} recovery={h.get('recovery_action')} "
          f"banks={h.get('remap_histogram')} flags="
          f"{[h.get(k) for k in kept[9:]]} forms agree: {len(set(rows.values())) == 1}")
    if len(set(rows.values())) != 1:
        for n, text in rows.items():
            print("   ", n, text[:600])
    links = h.get("nvlink_errors") or []
    total = {k: sum(l.get(k) or 0 for l in links) for k in ("replay", "recovery", "crc_flit", "crc_data")}
    smi = smi_links.get(i, {})
    smi_total = {names.get(k, k): sum(v.get(k, 0) for v in smi.values()) for k in names}
    crc_smi = sum(v.get("CRC Errors", 0) for v in smi.values())
    print(f"   NVML links {len(links)} {total}; nvlink -e links {len(smi)} {smi_total} CRC {crc_smi}; "
          f"agree: {len(links) == len(smi) and all(total[k] == smi_total[k] for k in smi_total)}")
unread = sorted({k for g in docs['live.jsonl'] for k in (g.get('unavailable') or {})
                 if any(s in k for s in ("FieldValues", "Histogram", "Sram", "Repair",
                                         "Unrepairable", "NvLinkError"))})
print("new calls NVML did not answer:", unread[:12], len(unread))
PY
tar -C "$work" -czf "$out/health.tgz" . && echo "packed $out/health.tgz"
