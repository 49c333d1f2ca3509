#!/usr/bin/env bash
# On the device tool (a real GPU): the card's own `nvidia-smi -q` text, `-q -x` XML and NVML
# recording, each fingerprinted by the agent as a user would (`--source`), beside the live
# driver. Reads only; changes no GPU setting. $OUT/forms.tgz comes back; here,
#   the comparison in bench/records/2026-11-25-h100-forms-*/command.txt
# (the field-by-field check of tests/agent/test_fixture_agreement.py) compares them.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
forms=$(mktemp -d)
nvidia-smi -q > "$forms/nvidia-smi-q.txt"
nvidia-smi -q -x > "$forms/nvidia-smi-q.xml"
nvidia-smi --version | head -n 3 > "$forms/nvidia-smi-version.txt"
python3 -m agent fingerprint --no-torch --record "$forms/nvml-recording.json" \
  > "$forms/live.jsonl"; echo "live rc=$?"
for f in nvidia-smi-q.txt nvidia-smi-q.xml nvml-recording.json; do
  python3 -m agent fingerprint --no-torch --source "$forms/$f" > "$forms/$f.jsonl"
  echo "$f rc=$?"
done
python3 - "$forms" <<'PY'
import json, sys
forms = sys.argv[1]
def doc(name):
    return json.loads(open(f"{forms}/{name}").read().splitlines()[-1])["document"]
live, replay = doc("live.jsonl"), doc("nvml-recording.json.jsonl")
print("live GPUs == replayed recording's GPUs:", live["gpus"] == replay["gpus"])
for name in ("nvidia-smi-q.txt.jsonl", "nvidia-smi-q.xml.jsonl"):
    d = doc(name)
    print(name, "source note:", d["source"]["note"])
    for g in d["gpus"]:
        v = g["variant"]
        print(" ", g["index"], g["name"], v["label"], v["form_factor"], g["virtualization_mode"],
              g["power_limit_w"], g["max_sm_clock_mhz"], "errors", d["errors"])
PY
tar -czf "$OUT/forms.tgz" -C "$forms" .
