#!/usr/bin/env bash
# GPU communicators on two "hosts" of one GPU machine: network namespaces
# zccg-a-PID and zccg-b-PID joined by a veth pair (10.79.0.1/24 and
# 10.79.0.2/24), one rank in each, both on GPU 0. The ranks are on different
# hosts to zcc (the namespace is part of a host's identity), so p2p and shm
# refuse the pair and the kernels reach the other rank only through the net
# transport's proxy; bootstrap and data cross a real TCP stack.
#
#   phase matrix    test_gpu_colls --netns (procs layout): the collective
#                   matrix (quick) with exact checks and 1000 graph replays,
#                   and mismatched collectives (count, collective, op: each
#                   rank's error names both calls, its signature having
#                   crossed between the namespaces), socket plug-in; the
#                   ranks' logs name net for the pair
#   phase ib        the same (200 replays) with the ib plug-in on the fake
#                   verbs provider (libzcc_fakeverbs.so beside libzcc)
#   phase ib-gdr    GPUDirect RDMA on the fake verbs provider
#                   (ZCC_NET_GDR_LEVEL=SYS: the fake's NIC is on no graph): the
#                   FIFOs in device memory registered through dmabuf, which the
#                   fake's "HCA" reads and writes with copies of its own; the
#                   matrix with exact checks, graph replays and the mismatches;
#                   then receive FIFOs only (ZCC_NET_GDR_READ=0), peermem
#                   (ZCC_DMABUF_ENABLE=0 ZCC_IB_PEERMEM=1), the hierarchical
#                   allreduce on 4 ranks; then each fallback to host staging
#                   with its reason in the log (no dmabuf, the default level),
#                   and a bad ZCC_NET_GDR_LEVEL refused at init
#   phase ib-gdr-perf  allreduce across the namespaces over fake ib, host
#                   staging (ZCC_NET_GDR_LEVEL=LOC) against GPUDirect RDMA
#                   (SYS), 8 B..GPU_HOSTS_MAX (run it under MPS)
#   phase mixed     4 ranks, 0 and 2 in A, 1 and 3 in B: pairs of one namespace
#                   over p2p, pairs across over net (the connector kernels on
#                   rings that cross between the namespaces); matrix, graphs
#                   and the mismatches (rank 0 against the other three)
#   phase hier      the hierarchical collectives (ZCC_ALGO=hier: every one but
#                   all-to-all and send/receive): 4 ranks as in mixed
#                   and 6 (3 in each namespace: blocks of unequal sizes), the
#                   matrix with exact checks, graph replays and the
#                   mismatches; the logs name hier for each (and a run
#                   with a 1 MiB staging buffer: reduce-scatter and reduce
#                   in passes).
#                   Then 3 ranks (2 and 1): hier refused at the call with
#                   its reason on every rank, nothing hangs
#                   (GPU_HOSTS_HIER_RANKS: the even layouts' rank counts)
#   phase wide      16 ranks (GPU_HOSTS_WIDE_RANKS), 8 in each namespace: more than the
#                   all-pairs kernels take, so the connector kernels alone run; the
#                   matrix with exact checks, graph replays and the mismatches with the
#                   model's choices (hier, all-to-all and send/receive over the per-peer
#                   connectors in rounds), then allreduce, all-gather and reduce-scatter on
#                   one ring of all 16 (ZCC_ALGO=ring), then rank 1 killed (run it under MPS)
#   phase hier-perf four allreduce_perf processes, 0 and 1 in A, 2 and 3 in
#                   B (--share-gpus 1), 8 B..GPU_HOSTS_MAX, with
#                   ZCC_ALGO=ring, hier and the model's choice in turn (run
#                   it under MPS: gpu_run.sh gnet-ns-mps); then the same for
#                   each other tool in GPU_HOSTS_HIER_TOOLS (allgather_perf)
#   phase mismatch  the mismatches alone, GPU_HOSTS_MISMATCH_ROUNDS rounds (every
#                   phase with mismatches runs that many, default 5): every
#                   rank's error names both calls and its output stays
#                   untouched (the kernels' signature gate); GPU_HOSTS_GATE=0
#                   runs it without the gate (ZCC_GPU_SIG_GATE=0)
#   phase kill      test_gpu_colls' deadpeer part across the namespaces: rank
#                   1 exits after one allreduce; rank 0's next one ends with
#                   an error within 30 s (ZCC_TIMEOUT=5000)
#   phase linkdown  allreduce_perf in both namespaces (ZCC_TIMEOUT=5000); the
#                   veth goes down: both exit with an error within
#                   ZCC_TIMEOUT + 10 s
#   phase perf      plain TCP (tcp_pair), then allreduce across the namespaces
#                   with host communicators and with GPU communicators, both
#                   over the net transport's socket plug-in, 8 B..GPU_HOSTS_MAX
#                   (default 256M), GPU_HOSTS_ITERS iterations (default 20)
#
# Usage: gpu_hosts.sh BIN_DIR LIB_DIR OUT_DIR [PHASE...]   (root; needs ip)
# Prints "gpu_hosts: N passed, M failed" last; exit 1 on a failure, and 0
# with "skipped" when namespaces cannot be made here.
set -u
BIN=${1:?bin dir} LIB=${2:?lib dir} OUT=${3:?out dir}
shift 3
PHASES=${*:-matrix ib mixed kill linkdown perf}
NAME=gpu_hosts
PASSED=0
FAILED=0
TAG=$$
NSA=zccg-a-$TAG NSB=zccg-b-$TAG VA=zga$TAG VB=zgb$TAG IPA=10.79.0.1 IPB=10.79.0.2
PIDS=()
mkdir -p "$OUT"
# shellcheck source=ns_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/ns_lib.sh"
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  ip link del "$VA" 2>/dev/null
}
trap cleanup EXIT
command -v ip >/dev/null 2>&1 || skip "iproute2's ip command is not here"
ip netns add "$NSA" 2>"$OUT/ns.err" || skip "cannot create a network namespace: $(cat "$OUT/ns.err")"
ip netns add "$NSB" 2>"$OUT/ns.err" || skip "cannot create a second namespace: $(cat "$OUT/ns.err")"
ip link add "$VA" type veth peer name "$VB" 2>"$OUT/ns.err" || skip "no veth pair: $(cat "$OUT/ns.err")"
ns_link_up "$NSA" "$VA" "$IPA" && ns_link_up "$NSB" "$VB" "$IPB" || skip "cannot bring the veth pair up"
export NCCL_NVLS_ENABLE=0
# ip may run with libraries of its own (a carried iproute2 sets LD_LIBRARY_PATH
# for itself, which `ip netns exec` hands on): the ranks get ours
LDP=${LD_LIBRARY_PATH:-}
FV=$LIB/libzcc_fakeverbs.so
TC=$BIN/test_gpu_colls
NETNS="--netns $NSA:$VA,$NSB:$VB"

# gpu_colls NAME TIMEOUT ENV... -- ARGS...: test_gpu_colls across the namespaces
gpu_colls() {
  local name=$1 to=$2 env=()
  shift 2
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  local t0=$(date +%s)
  timeout "$to" env ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT,NET "${env[@]}" "$TC" --ranks 2 \
    --layout procs $NETNS "$@" > "$OUT/$name.log" 2>&1
  local rc=$? line
  line=$(grep -E 'gpu colls: [0-9]+ checks' "$OUT/$name.log" | tail -1)
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    fail "$name: exit $rc after $(( $(date +%s) - t0 )) s: ${line:-no result line}"
    grep -E 'FAIL|rror' "$OUT/$name.log" | head -5 | sed 's/^/  /'
  else
    pass
    log "$name: $line ($(( $(date +%s) - t0 )) s)"
  fi
  if grep -q "via net" "$OUT/$name.log"; then pass; else fail "$name: no rank logged 'via net'"; fi
}

# pair NAME ENV...: one allreduce_perf rank in each namespace (torchrun-style rendezvous)
pair() {
  local name=$1 port=$((24000 + RANDOM % 8000)) secret
  shift
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  local common=(LD_LIBRARY_PATH="$LDP" WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
                MASTER_ADDR=$IPA MASTER_PORT=$port
                ZCC_COMM_SECRET=$secret ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT "$@")
  ip netns exec "$NSA" env "${common[@]}" RANK=0 ZCC_SOCKET_IFNAME="=$VA" \
    "$BIN/allreduce_perf" $PERF_ARGS > "$OUT/$name.txt" 2>&1 &
  PA=$!
  PIDS+=("$PA")
  ip netns exec "$NSB" env "${common[@]}" RANK=1 ZCC_SOCKET_IFNAME="=$VB" \
    "$BIN/allreduce_perf" $PERF_ARGS > "$OUT/$name.rank1.txt" 2>&1 &
  PB=$!
  PIDS+=("$PB")
}

# quad NAME ENV...: four allreduce_perf ranks on the one GPU, 0 and 1 in A, 2
# and 3 in B (torchrun-style rendezvous, one rank a process); rank r's
# output in NAME.txt (rank 0) or NAME.rankR.txt; their pids in QPIDS
quad() {
  local name=$1 port=$((24000 + RANDOM % 8000)) secret r ns v out
  shift
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  QPIDS=()
  for r in 0 1 2 3; do
    ns=$NSA v=$VA out=$OUT/$name.txt
    [ $r -ge 2 ] && ns=$NSB v=$VB
    [ $r -ge 1 ] && out=$OUT/$name.rank$r.txt
    ip netns exec "$ns" env LD_LIBRARY_PATH="$LDP" WORLD_SIZE=4 RANK=$r LOCAL_RANK=$((r % 2)) \
      LOCAL_WORLD_SIZE=2 MASTER_ADDR=$IPA MASTER_PORT=$port ZCC_COMM_SECRET=$secret \
      ZCC_SOCKET_IFNAME="=$v" ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT,TUNING "$@" \
      "$BIN/${QUAD_TOOL:-allreduce_perf}" $PERF_ARGS > "$out" 2>&1 &
    QPIDS+=($!)
    PIDS+=($!)
  done
}

# logged NAME TEXT MIN: at least MIN lines of NAME.log hold TEXT
logged() {
  local k
  k=$(grep -c -- "$2" "$OUT/$1.log")
  if [ "$k" -ge "$3" ]; then pass; log "$1: $k line(s) say '$2'"
  else fail "$1: $k line(s) say '$2', expected at least $3"; fi
}

MROUNDS=${GPU_HOSTS_MISMATCH_ROUNDS:-5}
for phase in $PHASES; do
  case $phase in
  mismatch)
    # the mismatch part alone, MROUNDS rounds (GPU_HOSTS_GATE=0: without the kernels' gate)
    gpu_colls mismatch ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=socket \
      ZCC_GPU_SIG_GATE=${GPU_HOSTS_GATE:-1} -- --only mismatch --mismatch-rounds $MROUNDS ;;
  matrix)
    gpu_colls matrix ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=socket -- --quick \
      --only matrix,graphs,errors,mismatch --replays 1000 --mismatch-rounds $MROUNDS ;;
  ib)
    if [ -e "$FV" ]; then
      gpu_colls ib ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=ib ZCC_IBV_LIBRARY="$FV" -- --quick \
        --only matrix,graphs,mismatch --replays 200 --mismatch-rounds $MROUNDS
    else
      log "ib: no $FV: skipped"
    fi ;;
  ib-gdr)
    if [ ! -e "$FV" ]; then log "ib-gdr: no $FV: skipped"; continue; fi
    IBG=(ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=ib ZCC_IBV_LIBRARY="$FV" ZCC_NET_GDR_LEVEL=SYS)
    gpu_colls ib-gdr ${GPU_HOSTS_TO:-600} "${IBG[@]}" -- --quick \
      --only matrix,graphs,mismatch --replays 200 --mismatch-rounds $MROUNDS
    logged ib-gdr "GPUDirect RDMA through dmabuf (NIC fakeverbs0:1, not on the topology graph; receive and send FIFOs in device memory" 2
    gpu_colls ib-gdr-recv ${GPU_HOSTS_TO:-600} "${IBG[@]}" ZCC_NET_GDR_READ=0 -- --quick --only matrix
    logged ib-gdr-recv "GPUDirect RDMA through dmabuf (NIC fakeverbs0:1, not on the topology graph; receive FIFOs in device memory" 2
    gpu_colls ib-gdr-peermem ${GPU_HOSTS_TO:-600} "${IBG[@]}" ZCC_DMABUF_ENABLE=0 ZCC_IB_PEERMEM=1 \
      ZCC_FAKEVERBS_PEERMEM=1 -- --quick --only matrix,graphs --replays 100
    logged ib-gdr-peermem "GPUDirect RDMA through nvidia-peermem" 2
    gpu_colls ib-gdr-hier ${GPU_HOSTS_TO:-600} "${IBG[@]}" ZCC_ALGO=hier ZCC_DEBUG_SUBSYS=INIT,NET,COLL \
      -- --quick --only matrix,graphs --replays 100 --ranks 4
    logged ib-gdr-hier "GPUDirect RDMA through dmabuf" 4
    logged ib-gdr-hier "hier over connectors: reduce-scatter on the host's ring of 2" 1
    # the fallbacks: host staging, each with its reason
    gpu_colls ib-gdr-nodmabuf ${GPU_HOSTS_TO:-600} "${IBG[@]}" ZCC_FAKEVERBS_DMABUF=0 ZCC_IB_PEERMEM=0 \
      -- --quick --only matrix --coll allreduce
    logged ib-gdr-nodmabuf "host staging: plug-in ib reaches host memory only on fakeverbs0:1" 2
    gpu_colls ib-gdr-level ${GPU_HOSTS_TO:-600} "${IBG[@]}" ZCC_NET_GDR_LEVEL= -- --quick --only matrix \
      --coll allreduce
    logged ib-gdr-level "host staging: NIC fakeverbs0:1 is not on the topology graph, beyond ZCC_NET_GDR_LEVEL=PIX" 2
    timeout 120 env "${IBG[@]}" ZCC_NET_GDR_LEVEL=FAR "$TC" --ranks 2 --layout procs $NETNS --quick \
      --only matrix --coll allreduce > "$OUT/ib-gdr-badlevel.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then pass; else fail "ib-gdr-badlevel: exit $rc"; fi
    logged ib-gdr-badlevel "ZCC_NET_GDR_LEVEL=FAR: expected LOC, PIX, PXB, PHB or SYS (or 0 to 4)" 1 ;;
  ib-gdr-perf)
    if [ ! -e "$FV" ]; then log "ib-gdr-perf: no $FV: skipped"; continue; fi
    PERF_ARGS="-b 8 -e ${GPU_HOSTS_MAX:-64M} -f 4 -n ${GPU_HOSTS_ITERS:-20} -w 5 -c 1"
    for g in LOC SYS LOC SYS; do
      n=ib-gdr-perf-$g
      [ -e "$OUT/$n.txt" ] && n=$n-2
      pair "$n" ZCC_DEVICE=cuda ZCC_NET_PLUGIN=ib ZCC_IBV_LIBRARY="$FV" ZCC_NET_GDR_LEVEL=$g \
        ZCC_TIMEOUT=${GPU_HOSTS_TIMEOUT:-60000} ZCC_DEBUG_SUBSYS=INIT,NET
      wait_pid $PA 600
      st=$?
      wait_pid $PB 60
      [ $st -eq 0 ] && pass || fail "$n: exit $st"
      log "$n: $(grep -o 'comm [^ ]* rank 0: \(GPUDirect\|FIFOs in\)[^;]*' "$OUT/$n.txt" | head -1)"
    done ;;
  mixed)
    gpu_colls mixed ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=socket -- --quick \
      --only matrix,graphs,mismatch --replays 100 --ranks 4 --mismatch-rounds $MROUNDS
    if grep -q "via p2p" "$OUT/mixed.log"; then pass; else fail "mixed: no rank logged 'via p2p'"; fi ;;
  hier)
    for n in ${GPU_HOSTS_HIER_RANKS-4 6}; do
      gpu_colls hier-n$n ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=socket ZCC_ALGO=hier \
        ZCC_DEBUG_SUBSYS=INIT,NET,COLL -- --quick --only matrix,graphs,mismatch --replays 200 \
        --ranks $n --mismatch-rounds $MROUNDS
      k=$(grep -c "hier over connectors: reduce-scatter on the host's ring of $((n / 2))" \
        "$OUT/hier-n$n.log")
      if [ "$k" -gt 0 ]; then pass; log "hier-n$n: $k allreduce(s) logged hier"
      else fail "hier-n$n: no allreduce logged hier over connectors"; fi
      k=$(grep -c "hier over connectors: all-gather on the rail of 2 hosts" "$OUT/hier-n$n.log")
      if [ "$k" -gt 0 ]; then pass; log "hier-n$n: $k all-gather(s) logged hier"
      else fail "hier-n$n: no all-gather logged hier over connectors"; fi
      k=$(grep -c "hier over connectors: reduce-scatter on the host's ring of $((n / 2)), 2 block" \
        "$OUT/hier-n$n.log")
      if [ "$k" -gt 0 ]; then pass; log "hier-n$n: $k reduce-scatter(s) logged hier"
      else fail "hier-n$n: no reduce-scatter logged hier over connectors"; fi
      for c in "broadcast along the rail of 2 hosts" "reduce on the host's ring of $((n / 2))"; do
        k=$(grep -c "hier over connectors: $c" "$OUT/hier-n$n.log")
        if [ "$k" -gt 0 ]; then pass; log "hier-n$n: $k call(s) logged '$c'"
        else fail "hier-n$n: no call logged '$c'"; fi
      done
    done
    # the hierarchical reduce-scatter and reduce in passes of a 1 MiB staging buffer (every
    # type, op and size of the matrix, up to 1 Mi + 3 elements a block)
    gpu_colls hier-rs-passes ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=socket \
      ZCC_ALGO=hier ZCC_GPU_BUFFSIZE=1M ZCC_DEBUG_SUBSYS=INIT,NET,COLL -- --only matrix \
      --coll reducescatter,reduce --ranks 4
    logged hier-rs-passes "into staging ([0-9]* channel(s)), then on the rail of 2 hosts ([0-9]* channel(s)), [2-9][0-9]* pass(es)" 1
    logged hier-rs-passes "into staging, then along the rail of 2 hosts to rank [0-9]*.*, [2-9][0-9]* pass(es)" 1
    # 2 ranks in one namespace, 1 in the other: refused, with the reason, on every rank
    t0=$(date +%s)
    timeout 300 env ZCC_TIMEOUT=20000 ZCC_NET_PLUGIN=socket ZCC_ALGO=hier "$TC" --ranks 3 \
      --layout procs $NETNS --quick --only matrix --coll allreduce > "$OUT/hier-uneven.log" 2>&1
    rc=$?
    k=$(grep -c "hier needs the same number of ranks on every host, at least 2 (here 1 to 2)" \
      "$OUT/hier-uneven.log")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$k" -gt 0 ]; then
      pass; log "hier-uneven: exit $rc after $(( $(date +%s) - t0 )) s, $k refusal(s) naming why"
    else
      fail "hier-uneven: exit $rc, $k refusal(s) naming why"
    fi ;;
  wide)
    # more GPU ranks than the all-pairs kernels take (8), in both namespaces: the model's
    # choices (hier on the hosts' rings of n/2 and the rails), then ZCC_ALGO=ring (one ring
    # over every rank), then a peer killed
    n=${GPU_HOSTS_WIDE_RANKS:-16}
    gpu_colls wide-n$n ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=30000 ZCC_NET_PLUGIN=socket \
      ZCC_DEBUG_SUBSYS=INIT,NET,COLL -- --quick --only matrix,graphs,mismatch --replays 100 \
      --ranks $n --mismatch-rounds $MROUNDS
    logged wide-n$n "rank 0: $n ranks, more than the all-pairs kernels take" 1
    logged wide-n$n "hier over connectors: reduce-scatter on the host's ring of $((n / 2))" 1
    logged wide-n$n "hier over connectors: all-gather on the rail of 2 hosts" 1
    logged wide-n$n "over connectors (send/receive), [0-9]* piece(s), [0-9]* launch(es)" 1
    logged wide-n$n "point-to-point op(s), [0-9]* self copy(ies), over connectors" 1
    gpu_colls wide-ring-n$n ${GPU_HOSTS_TO:-600} ZCC_TIMEOUT=30000 ZCC_NET_PLUGIN=socket \
      ZCC_ALGO=ring ZCC_DEBUG_SUBSYS=INIT,NET,COLL -- --quick --only matrix,graphs --replays 100 \
      --ranks $n --coll allreduce,allgather,reducescatter
    logged wide-ring-n$n "ring over connectors, [0-9]* channel(s), no copy" 1
    t0=$(date +%s)
    timeout 300 env ZCC_NET_PLUGIN=socket "$TC" --ranks $n --layout procs $NETNS \
      --only deadpeer > "$OUT/wide-kill.log" 2>&1
    rc=$?
    line=$(grep -E 'gpu colls: [0-9]+ checks' "$OUT/wide-kill.log" | tail -1)
    if [ $rc -eq 0 ] && [ -n "$line" ]; then
      pass; log "wide-kill: $line ($(( $(date +%s) - t0 )) s)"
    else
      fail "wide-kill: exit $rc after $(( $(date +%s) - t0 )) s: ${line:-no result line}"
    fi ;;
  hier-perf)
    max=${GPU_HOSTS_MAX:-256M}
    PERF_ARGS="-b 8 -e $max -f 4 -n ${GPU_HOSTS_ITERS:-20} -w 5 -c 1 --share-gpus 1"
    for QUAD_TOOL in ${GPU_HOSTS_HIER_TOOLS:-allreduce_perf}; do
      t=${QUAD_TOOL%_perf}
      [ "$t" = allreduce ] && t= || t=-$t
      for a in ring hier default; do
        v=ZCC_ALGO=$a
        [ $a = default ] && v=ZCC_ALGO=
        quad "hier-perf$t-$a" ZCC_DEVICE=cuda ZCC_NET_PLUGIN=socket ZCC_TIMEOUT=60000 $v
        st=0
        for p in "${QPIDS[@]}"; do wait_pid "$p" 600 || st=$?; done
        [ $st -eq 0 ] && pass || fail "hier-perf$t-$a: exit $st"
      done
    done
    QUAD_TOOL= ;;
  kill)
    gpu_colls kill 120 ZCC_NET_PLUGIN=socket -- --only deadpeer ;;
  linkdown)
    PERF_ARGS="-b 1M -e 1M -n 1000000 -w 5 -c 0"
    pair linkdown ZCC_NET_PLUGIN=socket ZCC_TIMEOUT=5000
    sleep 8
    down=$(date +%s.%N)
    ip -n "$NSA" link set "$VA" down
    for p in $PA $PB; do
      wait_pid "$p" 25
      st=$?
      t=$(awk -v a="$(date +%s.%N)" -v b="$down" 'BEGIN { printf "%.2f", a - b }')
      if [ $st -eq 0 ] || [ $st -eq 124 ]; then
        fail "linkdown: rank pid $p exit $st, $t s after the link went down"
      else
        pass
        log "linkdown: rank pid $p exit $st, $t s after the link went down"
      fi
    done
    grep -hE 'rror|imeout' "$OUT/linkdown.txt" "$OUT/linkdown.rank1.txt" | head -4 | sed 's/^/  /'
    ip -n "$NSA" link set "$VA" up ;;
  perf)
    max=${GPU_HOSTS_MAX:-256M}
    ip netns exec "$NSA" env LD_LIBRARY_PATH="$LDP" "$BIN/tcp_pair" --listen 23600 -b 8 \
      -e "$max" -f 4 -n 20 > "$OUT/tcp_pair.txt" 2>&1 &
    srv=$!
    sleep 0.5
    ip netns exec "$NSB" env LD_LIBRARY_PATH="$LDP" "$BIN/tcp_pair" --connect "$IPA:23600" \
      -b 8 -e "$max" -f 4 -n 20 > /dev/null 2>&1
    wait $srv
    PERF_ARGS="-b 8 -e $max -f 4 -n ${GPU_HOSTS_ITERS:-20} -w 5 -c 1"
    for kind in host gpu; do
      dev=cuda
      [ $kind = host ] && dev=host
      pair "perf-$kind" ZCC_DEVICE=$dev ZCC_NET_PLUGIN=socket ZCC_SHM_DISABLE=1 ZCC_TIMEOUT=60000
      wait_pid $PA 600
      st=$?
      wait_pid $PB 60
      [ $st -eq 0 ] && pass || fail "perf-$kind: exit $st"
      log "perf-$kind: $(grep -o 'rank 0 -> rank 1 .* via [a-z]*' "$OUT/perf-$kind.txt" | head -1)"
    done
    ;;
  *) fail "no phase $phase" ;;
  esac
done
log "$PASSED passed, $FAILED failed"
[ $FAILED -eq 0 ]
