#!/usr/bin/env bash
# On the device tool (one host of 2 or 4 GPUs): `python -m agent cluster` between two
# "nodes" made of one host's halves, so that NCCL goes through its network transport
# between them as it would between two hosts (docs/cluster.md, "Between the nodes").
# Reads only; changes no GPU setting (no nvidia-smi -pl/-lgc/-pm/-r). Under 3 minutes.
#
#   bash bench/device_cluster_split.sh      # $OUT: summary.txt and cluster-split.tgz
#
# Node A sees the first half of the GPUs (CUDA_VISIBLE_DEVICES=0, or 0,1 of 4), node B
# the other. Each half gets its own NCCL_HOSTID: NCCL's getHostHash (src/misc/utils.cc)
# takes NCCL_HOSTID, where set, instead of the hostname and boot id, and ranks of
# different host hashes are different hosts to NCCL: no P2P or SHM between them, its
# network (NET) instead, while the GPUs inside one half still talk over P2P.
#
#   1. healthy: the pair with --algo Ring, NCCL choosing its network (IB where the host
#      has a verbs device, else Socket).
#   2. Socket: the same with NCCL_NET=Socket, TCP through the host's interface.
#   3. failure: node B's command killed (SIGKILL) a few seconds into the collectives;
#      node A must exit 3 with its error within its --timeout-s, and neither node may
#      leave a rank behind.
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
work=$(mktemp -d)
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi -L | tee "$work/gpus.txt"
nvidia-smi topo -m > "$work/topo.txt" 2>&1
python3 -c 'import torch; v = torch.cuda.nccl.version()
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", v if isinstance(v, int) else ".".join(map(str, v)))' | tee "$work/stack.txt"
if [ "$gpus" -ge 4 ]; then
  half=2; devices_a=0,1; devices_b=2,3
elif [ "$gpus" -ge 2 ]; then
  half=1; devices_a=0; devices_b=1
else
  echo "needs 2 GPUs or more, found $gpus"; exit 1
fi
echo "node A: CUDA_VISIBLE_DEVICES=$devices_a, node B: $devices_b, $half rank(s) a node"

# $1 step name, $2 port, $3 timeout, $4 seconds into the timed collectives to kill node B
# (empty: none), $5 --sizes (empty: the default, 16M,256M,1G), the rest: VAR=value for
# both nodes' environment.
pair() {
  local name=$1 port=$2 timeout=$3 kill_after=$4 sizes=$5
  shift 5
  local common=(--address 127.0.0.1 --port "$port" --nodes 2 --ranks-per-node "$half"
                --algo Ring --timeout-s "$timeout" --step "$name")
  [ -n "$sizes" ] && common+=(--sizes "$sizes")
  echo "== $name: $* (port $port, timeout $timeout s)"
  local started=$SECONDS
  env "$@" CUDA_VISIBLE_DEVICES=$devices_a NCCL_HOSTID=fleet-split-a \
    timeout -s KILL 150 python3 -m agent cluster "${common[@]}" --node-rank 0 \
    > "$work/$name-a.jsonl" 2> "$work/$name-a.err" &
  local a=$!
  # Node B unwrapped where it is to be killed: $! must be its command's own pid.
  local guard=(timeout -s KILL 150)
  [ -n "$kill_after" ] && guard=()
  env "$@" CUDA_VISIBLE_DEVICES=$devices_b NCCL_HOSTID=fleet-split-b \
    "${guard[@]}" python3 -m agent cluster "${common[@]}" --node-rank 1 \
    > "$work/$name-b.jsonl" 2> "$work/$name-b.err" &
  local b=$!
  if [ -n "$kill_after" ]; then
    # The first timed phase: node B's rank has checked its first all_reduce.
    for _ in $(seq 600); do
      grep -q '"message": "all_reduce of .*checked' "$work/$name-b.jsonl" 2>/dev/null && break
      kill -0 "$b" 2>/dev/null || break
      sleep 0.1
    done
    sleep "$kill_after"
    echo "killing node B's command (pid $b) at $((SECONDS - started)) s"
    kill -KILL "$b"
  fi
  wait "$a"; local rc_a=$?
  echo "node A exit $rc_a after $((SECONDS - started)) s"
  wait "$b"; local rc_b=$?
  echo "node B exit $rc_b after $((SECONDS - started)) s"
  sleep 2
  local left
  left=$(ps -eo pid,args | grep "[a]gent.cluster.rank" | grep -c -- "--port $port" || true)
  echo "ranks of port $port left running: $left"
  echo "$name rc_a=$rc_a rc_b=$rc_b ranks_left=$left wall=$((SECONDS - started))" \
    >> "$work/exits.txt"
}

pair healthy 29551 60 "" ""
pair socket 29552 60 "" "" NCCL_NET=Socket
# 1 GiB four times over: seconds of collectives left when node B goes, even over IB.
pair failure 29553 20 3 1G,1G,1G,1G

python3 - "$work" <<'PY' | tee "$OUT/summary.txt"
import json, sys
work = sys.argv[1]
print(open(f"{work}/exits.txt").read())
for name in ("healthy", "socket", "failure"):
    for node in ("a", "b"):
        try:
            lines = open(f"{work}/{name}-{node}.jsonl").read().splitlines()
            body = json.loads(lines[-1])["cluster"]
        except (OSError, ValueError, IndexError, KeyError) as exc:
            print(f"{name} node {node}: no cluster event ({type(exc).__name__})")
            continue
        print(f"{name} node {node}: backend {body['backend']} algo {body['algo']} "
              f"wall {body['wall_s']} s, gpus {[g['uuid'] for g in body['gpus']]}")
        for e in body["errors"]:
            print(f"  error {e['stage']}: {e['message']}")
        for f in body["figures"]:
            print(f"  {f['op']:10} {f['size_bytes'] >> 20:5} MiB  busbw {f['busbw_gbs']:8.2f} "
                  f"GB/s (min {f['busbw_min_gbs']:.2f}, max {f['busbw_max_gbs']:.2f})  "
                  f"algbw {f['algbw_gbs']:.2f}  time {f['time_us']:.0f} us")
        print("  transport", json.dumps(body["transport"]))
        print("  settings", json.dumps(body["settings"]))
PY
tar -czf "$OUT/cluster-split.tgz" -C "$work" .
echo "files: $OUT/summary.txt $OUT/cluster-split.tgz"
