#!/usr/bin/env bash
# Issue 55 on a lent GPU: the job suite's training figure beside torchtitan's own Llama 3
# model code at the same shape, on the same card. First the agent as fleet runs it on a
# host (`python3 -m agent bench`, --suite all by default: the matmul soaked, then the job
# suite, eager with every attention backend and compiled with the fastest, then the node
# suite), then bench/job_titan.py: torchtitan 0.3.0's model imported from its wheel, 4
# layers of the 8B flavor, batch 2 x 4,096, bf16, with the backend the suite's eager
# figures made fastest (its compiled form's), soaked and timed eager and compiled; then
# torchtitan's own default attention for its Llama 3 (FlexAttention, block-causal),
# eager (its flex kernel is compiled either way). Ends with one table: every form's
# tokens/s a GPU and the suite's against torchtitan's. Nothing is changed on the GPU.
# Everything is packed into "$OUT/titan.tgz" after each step, so a run cut short still
# brings back what it finished; the table is also "$OUT/table.txt".
#
# torchtitan is not on the device and the device has no network: carry its wheel and the
# packages its model imports beyond torch and Triton (spmd_types, tyro, docstring_parser;
# typeguard is tyro's, not imported), all pure Python, fetched where pip works:
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp -d .whl torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 \
#     docstring_parser==0.18.0 typeguard==4.6.1
#
# and name `.whl` in the call's carry. About 7 minutes on one H100 or H200:
#
#   bash bench/device_titan_check.sh             # suite all, then torchtitan
#   SUITE=job bash bench/device_titan_check.sh   # the job suite alone (from idle)
#   STEPS=titan ATTENTION=cudnn bash bench/device_titan_check.sh   # torchtitan alone
#   FLEX=0 ...                                   # without the FlexAttention row
#   STEPS="suite titan compile" ...             # and the job suite with --job-compile
#   STEPS=forms bash bench/device_titan_check.sh # which forms move the figure (2 min):
#       bench/job_forms.py, the suite's eager step with each torchtitan form put back
#       as suite 1.3.0 wrote it (norm, RoPE, QKV, loss), one at a time, on the hot card
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
whl=${WHL:-.whl}
suite=${SUITE:-all}
steps=${STEPS:-suite titan}
work=$(mktemp -d)
out=${OUT:-$work}
site=$work/site
pack() { tar -czf "$out/titan.tgz" -C "$work" --exclude site . ; }
nvidia-smi -L
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,power.limit,clocks.sm --format=csv
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', \
torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), \
'triton', triton.__version__)"
if ls "$whl"/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$whl"/*.whl && echo "wheels: $(ls "$whl" | tr '\n' ' ')"
else
  echo "no wheels in $whl: torchtitan's steps will fail (see the header for the download)"
fi
t_start=$(date +%s)

if [[ " $steps " == *" suite "* ]]; then
  t0=$(date +%s.%N)
  python3 -m agent bench --suite "$suite" > "$work/suite.jsonl" 2> "$work/suite.err"
  echo "suite ($suite) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/suite.jsonl" <<'PY' | tee "$work/suite.txt"
import json, sys
doc, job = None, []
for line in open(sys.argv[1]):
    event = json.loads(line)
    if event["event"] == "document":
        doc = event["document"]
    elif event.get("stage") == "job":
        job.append(event["elapsed_s"])
if doc is None:
    sys.exit("  no document")
for r in doc.get("jobs", []):
    form = "compiled" if r["compiled"] else "eager"
    extra = (f"MFU {r['mfu'] or 0:.3f} compile {r['compile_s']} s" if r["workload"] == "train"
             else f"{r['gbs']:.0f} GB/s copy {r.get('copy_share') or 0:.3f}")
    print(f"  GPU {r['gpu_index']} {r['workload'][:3]} {str(r.get('point') or '')[:3]:3} "
          f"{r['attention']:9} {form:8} {'H' if r['headline'] else ' '} "
          f"{r['tokens_per_s']:10.1f} {extra} suite {r['suite_version']}")
for e in doc["errors"]:
    print("  error:", e["message"][:300])
if job:
    print(f"  job stage {job[0]} -> {job[-1]}: {job[-1] - job[0]:.1f} s")
PY
  grep -h "compiled with\|caches in" "$work/suite.jsonl" | head -4 | cut -c1-300
  pack
fi

if [[ " $steps " == *" titan "* ]]; then
  backend=${ATTENTION:-$(python3 - "$work/suite.jsonl" <<'PY' 2>/dev/null
import json, sys
doc = [json.loads(l) for l in open(sys.argv[1])][-1]["document"]
compiled = [r for r in doc["jobs"] if r["workload"] == "train" and r["compiled"]]
eager = sorted((r for r in doc["jobs"] if r["workload"] == "train" and not r["compiled"]),
               key=lambda r: -r["tokens_per_s"])
print((compiled or eager)[0]["attention"])
PY
)}
  backend=${backend:-cudnn}
  PYTHONPATH=$site python3 bench/job_titan.py --attention "$backend" --forms eager,compiled \
    >> "$work/titan.jsonl" 2>> "$work/titan.err"
  echo "torchtitan $backend eager,compiled rc=$?"
  pack
  if [ "${FLEX:-1}" = 1 ]; then
    PYTHONPATH=$site python3 bench/job_titan.py --attention flex --forms eager \
      >> "$work/titan.jsonl" 2>> "$work/titan.err"
    echo "torchtitan flex eager rc=$?"
    pack
  fi
  grep -v "^eager\|^compiled" "$work/titan.err" | tail -15
fi

if [[ " $steps " == *" compile "* ]]; then
  # The job suite alone with its training step compiled too (--job-compile), the compiled
  # step gated against float32 as the backends are.
  t0=$(date +%s.%N)
  python3 -m agent bench --suite job --job-compile > "$work/compile.jsonl" \
    2> "$work/compile.err"
  echo "suite (job --job-compile) rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  python3 - "$work/compile.jsonl" <<'PY' | tee "$work/compile.txt"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
for e in events:
    if e.get("event") == "progress" and "compiled with" in e.get("message", ""):
        print("  ", e["elapsed_s"], e["message"][:200])
doc = events[-1]["document"]
for r in doc["jobs"]:
    if r["workload"] == "train":
        print(f"  GPU {r['gpu_index']} train {r['attention']:9} "
              f"{'compiled' if r['compiled'] else 'eager':8} {'H' if r['headline'] else ' '} "
              f"{r['tokens_per_s']:10.1f} compile {r['compile_s']} gate "
              f"{r['correctness']['grad_max_rel_error']}")
for e in doc["errors"]:
    print("  error:", e["message"][:300])
PY
  pack
fi

if [[ " $steps " == *" forms "* ]]; then
  # Heat the card first (a matmul a minute), as the suite's soak would have.
  python3 -c "
import time, torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
end = time.time() + float('${FORMS_HEAT_S:-45}')
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()"
  python3 bench/job_forms.py --attention "${ATTENTION:-cudnn}" > "$work/forms.jsonl" \
    2> "$work/forms.err"
  echo "forms rc=$?"
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f\"  {r['form']:22} {r['tokens_per_s']:10,.0f} tokens/s {r['change']:+.2%}\")
" "$work/forms.jsonl" | tee "$work/forms.txt"
  pack
fi

python3 - "$work/suite.jsonl" "$work/titan.jsonl" <<'PY' | tee "$work/table.txt"
import json, os, statistics, sys
rows, suite, compiles = [], {}, []
if os.path.exists(sys.argv[1]):
    docs = [json.loads(l) for l in open(sys.argv[1]) if '"document"' in l]
    for r in docs[-1]["document"]["jobs"] if docs else []:
        if r["workload"] == "train":
            key = (r["attention"], "compiled" if r["compiled"] else "eager")
            suite.setdefault(key, []).append(r["tokens_per_s"])
            if r["headline"]:
                suite.setdefault(("headline", "*"), []).append(r["tokens_per_s"])
            if r["compile_s"] is not None:
                compiles.append(r["compile_s"])
for (attention, form), values in sorted(suite.items()):
    rows.append(("fleet job suite", attention, form, statistics.median(values),
                 statistics.median(compiles) if form == "compiled" and compiles else None))
if os.path.exists(sys.argv[2]):
    for line in open(sys.argv[2]):
        t = json.loads(line)
        rows.append((f"torchtitan {t['torchtitan']}", t["attention"], t["form"],
                     t["tokens_per_s"], t["compile_s"]))
        if t["shims"]:
            print("  torchtitan ran with stand-ins for:", ", ".join(t["shims"]))
print(f"{'what':22} {'attention':9} {'form':8} {'tokens/s a GPU':>14} {'vs torchtitan':>13}"
      f" {'compile s':>9}")
titan = {(a, f): v for w, a, f, v, _ in rows if w.startswith("torchtitan")}
for what, attention, form, value, compile_s in rows:
    ref = titan.get((attention, form)) if what.startswith("fleet") else None
    ratio = f"{value / ref - 1:+.2%}" if ref else ""
    print(f"{what:22} {attention:9} {form:8} {value:14,.0f} {ratio:>13}"
          f" {'' if compile_s is None else f'{compile_s:9.1f}'}")
PY
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv
echo "total $(( $(date +%s) - t_start )) s"
cp "$work/table.txt" "$out/table.txt" 2>/dev/null
pack
