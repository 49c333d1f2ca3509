#!/usr/bin/env bash
# On the device tool, a host of 2 GPUs (nvidia-h200-x2): the whole cluster's step
# (`python -m agent cluster --whole`: all-reduce, all-gather, reduce-scatter, all-to-all
# to 16 GiB) over both GPUs, against nccl-tests (NVIDIA/nccl-tests, its source carried in
# .nccltests/ and built there against the image's own NCCL, which its header line names)
# at the same sizes; then the same
# step between the host's halves made two "nodes" by NCCL_HOSTID (bench/
# device_cluster_split.sh says how), NCCL's network transport between them. Reads only;
# changes no GPU setting; NVLink multicast stays off (NCCL_NVLS_ENABLE=0, the image's).
#
#   bash bench/device_cluster_x2.sh     # carry .nccltests; $OUT: the events and logs
#   SOAK_ITERS=2400 SPLIT=0 bash bench/device_cluster_x2.sh
#       # first nccl-tests' 16 GiB all-reduce back to back (2,400 calls: about 2 minutes),
#       # so that both figures are read from cards already at load; no split step
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.."
nvidia-smi -L; nvidia-smi topo -m | head -4
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
# Fetch it here first: git --git-dir=<mirror of NVIDIA/nccl-tests> archive HEAD | tar -x
# -C .nccltests (a0b82b2 in the record), and name .nccltests in the call's carry.
(cd .nccltests && make -j 16 src.build CUDA_HOME=/usr/local/cuda \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$OUT/build.log" 2>&1); echo "build rc=$?"
if [ -n "${SOAK_ITERS:-}" ]; then
  echo "== 0. soak: nccl-tests' 16 GiB all-reduce, $SOAK_ITERS calls"
  nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv
  /usr/bin/time -f "soak %e s" .nccltests/build/all_reduce_perf -b 16G -e 16G -g 2 -w 5 \
    -n "$SOAK_ITERS" -d float > "$OUT/soak.txt" 2>&1; tail -3 "$OUT/soak.txt"
  nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv
fi
echo "== 1. fleet, one node of 2 GPUs, --whole"
timeout 300 python3 -m agent cluster --address 127.0.0.1 --port 29550 --nodes 1 \
  --node-rank 0 --ranks-per-node 2 --whole --timeout-s 120 > "$OUT/whole-1x2.jsonl" \
  2> "$OUT/whole-1x2.err"; echo "rc=$?"
echo "== 2. nccl-tests, one process, -g 2, the same sizes"
for t in all_reduce all_gather reduce_scatter alltoall; do
  timeout 200 .nccltests/build/${t}_perf -b 16M -e 16G -f 4 -g 2 -w 5 -n 20 -d float \
    > "$OUT/nccltests-$t.txt" 2>&1; echo "$t rc=$?"
done
echo "== 3. fleet, two nodes split by NCCL_HOSTID, --whole"
for rank in $([ "${SPLIT:-1}" = 0 ] || echo 0 1); do
  CUDA_VISIBLE_DEVICES=$rank NCCL_HOSTID=fleet-split-$rank timeout 400 python3 -m agent \
    cluster --address 127.0.0.1 --port 29560 --nodes 2 --node-rank $rank \
    --ranks-per-node 1 --whole --timeout-s 120 > "$OUT/whole-2x1-$rank.jsonl" \
    2> "$OUT/whole-2x1-$rank.err" &
done
wait; echo "split done"
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
for name in ("whole-1x2", "whole-2x1-0"):
    if not os.path.exists(os.path.join(out, name + ".jsonl")):
        continue
    for line in open(os.path.join(out, name + ".jsonl")):
        e = json.loads(line)
        if e.get("event") != "cluster":
            continue
        c = e["cluster"]
        print(name, "errors", c["errors"], "wall", c["wall_s"], "transport",
              c["transport"].get("network"), c["transport"].get("paths", [])[:2])
        for f in c["figures"]:
            print(f"  {f['op']:<15} {f['size_bytes'] >> 20:>6} MiB busbw {f['busbw_gbs']:>8.2f}"
                  f" time {f['time_us']:>10.1f} us checked {f['checked']}")
PY
grep -h "float\|Avg bus" "$OUT"/nccltests-*.txt | grep -v "^#  Rank"
