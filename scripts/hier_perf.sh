#!/usr/bin/env bash
# Host allreduce across two network namespaces (two "hosts" joined by a veth
# pair), HIER_PERF_RPH ranks in each (default 2): each algorithm in
# HIER_PERF_ALGOS (default "model hier ring oneshot"; model: no ZCC_ALGO, the
# cost model's pick) one after the other, the whole list HIER_PERF_ROUNDS
# times (default 2), HIER_PERF_TOOL (allreduce_perf; broadcast_perf,
# reduce_perf) -b 8 -e HIER_PERF_MAX (16M) -f 4 -n
# HIER_PERF_ITERS (20) -w 5 -c 1 (every result checked exactly). Root (ip
# netns). HIER_PERF_ENV (VAR=value ...) goes to every rank (for example
# ZCC_TOPO_MEASURE=1: the model's pick on the measured link). Results to $OUT (default ./hier_perf_out), one file per run, and a
# table of rank 0's out-of-place times (us) on stdout.
#
#   scripts/hier_perf.sh [BUILD_DIR]      (default build-host, else build)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-}
if [ -z "$build" ]; then
  build=$root/build-host
  [ -x "$build/tools/allreduce_perf" ] || build=$root/build
fi
[ -x "$build/tools/${HIER_PERF_TOOL:-allreduce_perf}" ] ||
  { echo "hier_perf: no $build/tools/${HIER_PERF_TOOL:-allreduce_perf} (build the project first)"; exit 1; }
command -v ip >/dev/null || { echo "hier_perf: needs iproute2's ip"; exit 1; }
OUT=${OUT:-$PWD/hier_perf_out}
mkdir -p "$OUT"
RPH=${HIER_PERF_RPH:-2}
MAX=${HIER_PERF_MAX:-16M}
ITERS=${HIER_PERF_ITERS:-20}
ROUNDS=${HIER_PERF_ROUNDS:-2}
ALGOS=${HIER_PERF_ALGOS:-model hier ring oneshot}
TOOL=${HIER_PERF_TOOL:-allreduce_perf}
TAG=$$
NSA=zchp-a-$TAG NSB=zchp-b-$TAG VA=zqa$TAG VB=zqb$TAG IPA=10.79.0.1 IPB=10.79.0.2
# shellcheck source=../tests/net/ns_lib.sh
. "$root/tests/net/ns_lib.sh"
ns_pair_begin
{
  ns_perf_info "$root"
  echo "ranks: $RPH in each of 2 namespaces; sizes 8 B .. $MAX; $ITERS iterations; rounds $ROUNDS; algorithms $ALGOS; $TOOL; env ${HIER_PERF_ENV:-}"
} | tee "$OUT/info.txt"

# run NAME ALGO: 2 x RPH ranks, torchrun-style rendezvous; rank 0's output in $OUT/NAME.txt
run() {
  local name=$1 algo=$2 port=$((24000 + RANDOM % 8000)) secret n=$((2 * RPH)) r pids=()
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  local extra=()
  [ "$algo" != model ] && extra=(ZCC_ALGO="$algo")
  for ((r = 0; r < n; r++)); do
    local ns=$NSA v=$VA host=hp-a out=/dev/null
    if [ $r -ge "$RPH" ]; then ns=$NSB v=$VB host=hp-b; fi
    [ $r -eq 0 ] && out=$OUT/$name.txt
    ip netns exec "$ns" env ZCC_DEVICE=host WORLD_SIZE=$n RANK=$r LOCAL_RANK=$((r % RPH)) \
      LOCAL_WORLD_SIZE="$RPH" MASTER_ADDR=$IPA MASTER_PORT=$port ZCC_COMM_SECRET="$secret" \
      ZCC_TIMEOUT=60000 ZCC_SOCKET_IFNAME="=$v" ZCC_HOSTNAME=$host ZCC_DEBUG=INFO \
      ZCC_DEBUG_SUBSYS=COLL,TUNING ${HIER_PERF_ENV:-} "${extra[@]}" \
      "$build/tools/$TOOL" -b 8 -e "$MAX" -f 4 -n "$ITERS" -w 5 -c 1 > "$out" 2>&1 &
    pids+=($!)
  done
  local st=0
  for r in "${pids[@]}"; do wait "$r" || st=1; done
  [ $st = 0 ] || echo "hier_perf: $name: a rank failed (see $OUT/$name.txt)"
}

names=()
for ((k = 1; k <= ROUNDS; k++)); do
  for a in $ALGOS; do
    run "$a-$k" "$a"
    names+=("$a-$k")
  done
done

# The table: size, then each run's out-of-place time; the algorithm the
# model ran at each size is in model-*.txt's "via" lines.
{
  printf '%10s' bytes
  for nm in "${names[@]}"; do printf ' %11s' "$nm"; done
  echo
  for s in $(awk '/^ +[0-9]+ +[0-9]+ +[a-z]/ {print $1}' "$OUT/${names[0]}.txt"); do
    printf '%10s' "$s"
    for nm in "${names[@]}"; do
      printf ' %11s' "$(awk -v s="$s" '$1 == s && NF >= 13 {print $6; exit}' "$OUT/$nm.txt")"
    done
    echo
  done
  echo "wrong elements: $(awk '/^ +[0-9]+ +[0-9]+ +[a-z]/ {w += $9 + $13} END {print w + 0}' "$OUT"/*.txt)"
} | tee "$OUT/table.txt"
