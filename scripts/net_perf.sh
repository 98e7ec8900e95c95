#!/usr/bin/env bash
# Host communicators across two network namespaces joined by a veth pair:
# the plain-TCP reference (tools/tcp_pair) and zcc's sendrecv and allreduce
# with one rank in each namespace, over
#   socket      the socket transport (ZCC_NET_PLUGIN=ib finds no device)
#   net-socket  the net transport with the socket plug-in
#   net-ib      the net transport with the ib plug-in on the fake verbs
#               provider (a TCP emulation: says nothing of RDMA speed)
# in one run, one after the other. Root (ip netns). Results to $OUT (default
# ./net_perf_out), one file per run, and a summary on stdout.
#
#   scripts/net_perf.sh [BUILD_DIR]      (default build-host, else build)
#
# NET_PERF_MAX (default 64M) is the largest size, NET_PERF_ITERS (20) the
# timed iterations per size.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-}
if [ -z "$build" ]; then
  build=$root/build-host
  [ -x "$build/tools/sendrecv_perf" ] || build=$root/build
fi
for t in tools/tcp_pair tools/sendrecv_perf tools/allreduce_perf tests/fakeverbs/libzcc_fakeverbs.so; do
  [ -e "$build/$t" ] || { echo "net_perf: no $build/$t (build the project first)"; exit 1; }
done
command -v ip >/dev/null || { echo "net_perf: needs iproute2's ip"; exit 1; }
OUT=${OUT:-$PWD/net_perf_out}
mkdir -p "$OUT"
MAX=${NET_PERF_MAX:-64M}
ITERS=${NET_PERF_ITERS:-20}
TAG=$$
NSA=zccp-a-$TAG NSB=zccp-b-$TAG VA=zpa$TAG VB=zpb$TAG IPA=10.78.0.1 IPB=10.78.0.2
# shellcheck source=../tests/net/ns_lib.sh
. "$root/tests/net/ns_lib.sh"
ns_pair_begin

{
  ns_perf_info "$root"
  ip -n "$NSA" link show "$VA" | head -1
} > "$OUT/info.txt"
cat "$OUT/info.txt"

echo "== tcp_pair (plain TCP, both directions at once)"
ip netns exec "$NSA" "$build/tools/tcp_pair" --listen 23500 -b 8 -e "$MAX" -f 4 -n "$ITERS" \
  > "$OUT/tcp_pair.txt" 2>&1 &
srv=$!
ip netns exec "$NSB" "$build/tools/tcp_pair" --connect "$IPA:23500" -b 8 -e "$MAX" -f 4 -n "$ITERS" \
  > /dev/null 2>&1
wait $srv
cat "$OUT/tcp_pair.txt"

# run_pair NAME TOOL ENV...: one rank in each namespace, torchrun-style rendezvous
run_pair() {
  local name=$1 tool=$2 port=$((24000 + RANDOM % 8000)) secret
  shift 2
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  local common=(ZCC_DEVICE=host WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$IPA
                MASTER_PORT=$port ZCC_COMM_SECRET=$secret ZCC_TIMEOUT=60000
                ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT "$@")
  ip netns exec "$NSA" env "${common[@]}" RANK=0 ZCC_SOCKET_IFNAME="=$VA" ZCC_HOSTNAME=ns-a \
    "$build/tools/$tool" -b 8 -e "$MAX" -f 4 -n "$ITERS" -w 5 -c 1 > "$OUT/$name.txt" 2>&1 &
  local a=$!
  ip netns exec "$NSB" env "${common[@]}" RANK=1 ZCC_SOCKET_IFNAME="=$VB" ZCC_HOSTNAME=ns-b \
    "$build/tools/$tool" -b 8 -e "$MAX" -f 4 -n "$ITERS" -w 5 -c 1 > "$OUT/$name.rank1.txt" 2>&1
  wait $a
  echo "== $name: $(grep -o 'rank 0 -> rank 1 .* via [a-z]*' "$OUT/$name.txt" | head -1)"
  grep -E '^ +[0-9]|wrong|rror' "$OUT/$name.txt"
}

fv=$build/tests/fakeverbs/libzcc_fakeverbs.so
for tool in sendrecv_perf allreduce_perf; do
  t=${tool%_perf}
  run_pair "$t-socket" $tool ZCC_NET_PLUGIN=ib ZCC_IBV_LIBRARY=/nonexistent
  run_pair "$t-net-socket" $tool ZCC_NET_PLUGIN=socket
  run_pair "$t-net-ib" $tool ZCC_NET_PLUGIN=ib ZCC_IBV_LIBRARY="$fv"
done
