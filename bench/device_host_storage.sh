#!/usr/bin/env bash
# Issue 58 on a lent node: the agent's host limits and storage suite, run with the image's
# own python3 (stdlib, pynvml and torch there; no network). Reads only on the GPU: the
# fingerprint reads NVML, `nvidia-smi boost-slider -l` lists; the storage suite writes
# and removes its own folder under the temporary folder (30 s budget, 2 GiB checkpoint).
#   bash bench/device_host_storage.sh        # from the folder holding agent/; $OUT gets
#                                            # context.txt, run.jsonl, stderr.txt,
#                                            # host_limits.json, storage.json, summary.txt
set -u
OUT=${OUT:-/tmp/fleet-host-storage}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  date -u +%FT%TZ; uname -r; nproc; python3 --version
  findmnt -no SOURCE,FSTYPE,OPTIONS -T /tmp; findmnt -no SOURCE,FSTYPE,OPTIONS /dev/shm
  df -h /tmp /dev/shm "$HOME"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for tool in fio nvidia-ctk nvidia-container-cli nv-fabricmanager; do
    printf '%s: %s\n' "$tool" "$(command -v "$tool" || echo absent)"
  done
} > "$OUT/context.txt" 2>&1
SECONDS=0
python3 -m agent bench --suite storage > "$OUT/run.jsonl" 2> "$OUT/stderr.txt"
status=$?
echo "agent exit $status after ${SECONDS} s" | tee -a "$OUT/context.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
events = [json.loads(line) for line in open(f"{out}/run.jsonl")]
doc = events[-1]["document"]
for key in ("host_limits", "storage"):
    with open(f"{out}/{key}.json", "w") as fh:
        json.dump(doc[key], fh, indent=1, sort_keys=True)
print("errors:", doc["errors"])
print("host:", {k: doc["host"][k] for k in ("platform", "hypervisor", "container",
                                             "cpu_model", "cpu_count", "memory_total_mib",
                                             "torch_version", "is_root")})
print("gpus:", [(g["index"], (g.get("variant") or {}).get("label")) for g in doc["gpus"]])
limits = doc["host_limits"] or {}
for key in ("cpus_usable", "cgroup", "memory_total_mib", "numa", "governors",
            "cpufreq_driver", "shm_bytes", "memlock_soft_bytes", "memlock_unlimited",
            "hugepages_total", "transparent_hugepages", "iommu", "profiling_admin_only",
            "software", "import_torch_s", "import_torch_error", "read_s"):
    print(f"{key}: {limits.get(key)}")
acs = limits.get("acs") or {}
print("acs:", acs.get("endpoints"), "endpoints,", len(acs.get("bridges") or []),
      "bridges, readable", acs.get("readable"),
      "redirecting", [b["address"] for b in acs.get("bridges") or [] if b.get("redirect")])
storage = doc["storage"] or {}
print("storage:", storage.get("seconds"), "s of", storage.get("budget_s"),
      "; shared mounts", storage.get("shared_mounts"))
for t in storage.get("targets") or []:
    print({k: t[k] for k in ("path", "role", "fs_type", "refused", "direct", "write_gbps",
                             "read_gbps", "small_create_per_s", "small_read_per_s",
                             "checkpoint_bytes", "checkpoint_write_gbps",
                             "checkpoint_read_gbps", "checkpoint_evicted",
                             "checkpoint_error", "seconds", "notes")})
PY
exit "$status"
