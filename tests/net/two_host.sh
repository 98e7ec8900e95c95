#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces zcc-a-PID and zcc-b-PID
# joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24), each with its own
# UTS namespace and hostname, 2 ranks in each. Bootstrap and data between
# the namespaces cross a real TCP stack.
#
#   phase check      4 ranks, every collective, exact results (net_driver)
#   phase env        the same through zccCommInitFromEnv (torchrun variables)
#   phase linkdown   4 ranks loop on allreduces; the veth goes down: every
#                    rank returns an error within ZCC_TIMEOUT + 2 s
#   phase heartbeat  as linkdown with ZCC_TIMEOUT=60000 and ZCC_HEARTBEAT_MS=500:
#                    every rank returns an error within 5 s (keepalive
#                    heartbeats, not the timeout, find the dead link: on the
#                    socket transport's connections, and on the bootstrap's
#                    idle ring links, which the ranks watch while they wait:
#                    the net transport's data connections carry data both
#                    ways, and keepalive probes only a connection with
#                    nothing of its own in flight)
#   phase kill       as linkdown, but the ranks of namespace B are SIGKILLed:
#                    the ranks of A return an error within ZCC_TIMEOUT + 2 s
#   phase interleave ranks 0 and 2 in A, 1 and 3 in B, every collective with the
#                    ring forced (ZCC_ALGO=ring), exact results; every rank
#                    logs the host ring 0 2 1 3, which crosses between the
#                    namespaces twice, not at every step
#   phase hier       ZCC_ALGO=hier: 4 ranks, 0 and 2 in A, 1 and 3 in B, every
#                    collective exact, all but all-to-all and send/receive
#                    hierarchical (the logs say so); 3 ranks (2 in A, 1 in B): refused, naming why,
#                    and all-to-all and send/receive pass after the refusals
#   phase net-socket check, linkdown, heartbeat and kill over the net transport with the
#                    socket plug-in (ZCC_NET_PLUGIN=socket); the ranks' logs
#                    name net for every pair across the namespaces
#   phase net-ib     the same with the ib plug-in on the fake verbs provider
#                    (ZCC_TEST_FAKEVERBS: the path of libzcc_fakeverbs.so)
#
# Usage: two_host.sh /path/to/net_driver
# Skips (exit 0, "0 passed, 0 failed, 1 skipped") without the privileges to
# create network namespaces. Cleans up namespaces and ranks on every exit.
# ZCC_TEST_SEED fixes the inputs; ZCC_TEST_NET_PHASES="check kill" a subset;
# ZCC_TEST_KEEP=1 keeps the ranks' logs.
set -u

DRIVER=${1:-}
PASSED=0
FAILED=0
TAG=$$
NSA=zcc-a-$TAG
NSB=zcc-b-$TAG
VA=zva$TAG
VB=zvb$TAG
IPA=10.77.0.1
IPB=10.77.0.2
FAULT_TIMEOUT_MS=3000
PIDS=()
WORK=
RANK_ENV=()  # more variables for every rank (the net phases)
PHASE_TAG=   # prefix of the phases' folders

NAME=two_host
# shellcheck source=ns_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/ns_lib.sh"

cleanup() {
  local p
  for p in "${PIDS[@]}"; do
    kill -9 "$p" 2>/dev/null
  done
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  ip link del "$VA" 2>/dev/null
  remove_work
}
ns_begin "$DRIVER" zcc-two-host

if ! ip netns add "$NSA" 2>"$WORK/err"; then
  skip "cannot create a network namespace ($(tr '\n' ' ' <"$WORK/err")); needs root or CAP_SYS_ADMIN"
fi
ip netns add "$NSB" 2>"$WORK/err" || skip "cannot create a second network namespace: $(cat "$WORK/err")"
if ! ip link add "$VA" type veth peer name "$VB" 2>"$WORK/err"; then
  skip "cannot create a veth pair ($(tr '\n' ' ' <"$WORK/err"))"
fi
set -e
ns_link_up "$NSA" "$VA" "$IPA"
ns_link_up "$NSB" "$VB" "$IPB"
set +e

UTS=1
if ! unshare --uts true 2>/dev/null; then
  UTS=0
  log "note: unshare --uts is not available; the namespaces share a hostname"
fi

SEED=${ZCC_TEST_SEED:-$(( (RANDOM << 15) ^ RANDOM ^ TAG ))}
PHASES=${ZCC_TEST_NET_PHASES:-check interleave hier env linkdown heartbeat kill}
log "namespaces $NSA ($VA $IPA) and $NSB ($VB $IPB); seed $SEED (rerun with ZCC_TEST_SEED=$SEED)"

veth_bytes() { # rx+tx bytes of VA
  local rx tx
  rx=$(ip netns exec "$NSA" cat "/sys/class/net/$VA/statistics/rx_bytes" 2>/dev/null || echo 0)
  tx=$(ip netns exec "$NSA" cat "/sys/class/net/$VA/statistics/tx_bytes" 2>/dev/null || echo 0)
  echo $((rx + tx))
}

# rank r lives in namespace A for r < 2, else B
rank_ns() { if [ "$1" -lt 2 ]; then echo "$NSA zcc-host-a $VA"; else echo "$NSB zcc-host-b $VB"; fi; }
# the interleaved layout: even ranks in A, odd in B
rank_ns_alt() { if [ $(($1 % 2)) -eq 0 ]; then echo "$NSA zcc-host-a $VA"; else echo "$NSB zcc-host-b $VB"; fi; }

phase_check() {
  local dir=$WORK/${PHASE_TAG}check pids=() r st before after
  mkdir -p "$dir"
  before=$(veth_bytes)
  local t0=$(date +%s)
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    start_rank $(rank_ns $r) "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 "$DRIVER" --rank $r --nranks 4 --id-file "$dir/id" --seed "$SEED" --mode check
    pids+=("$LAST_PID")
  done
  for r in 0 1 2 3; do
    wait_pid "${pids[$r]}" 400
    st=$?
    collect "$dir/rank$r.log" $st "check rank $r"
  done
  after=$(veth_bytes)
  log "check: $(( $(date +%s) - t0 )) s, $(( (after - before) / 1024 )) KiB crossed $VA"
  # 1 MiB+3 float32 collectives between the namespaces move well over 8 MiB.
  if [ $((after - before)) -ge $((8 * 1024 * 1024)) ]; then
    pass
  else
    fail "check: only $((after - before)) bytes crossed the veth; expected >= 8 MiB (is the socket transport used between namespaces?)"
  fi
}

phase_env() {
  local dir=$WORK/env pids=() r st
  local port=$(( 20000 + (TAG % 20000) ))
  local secret
  secret=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  mkdir -p "$dir"
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    start_rank $(rank_ns $r) "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=$IPA MASTER_PORT=$port ZCC_COMM_SECRET="$secret" \
      "$DRIVER" --mode env --seed "$SEED" --sizes small
    pids+=("$LAST_PID")
  done
  for r in 0 1 2 3; do
    wait_pid "${pids[$r]}" 300
    st=$?
    collect "$dir/rank$r.log" $st "env rank $r"
  done
}

phase_interleave() {
  local dir=$WORK/interleave pids=() r st
  mkdir -p "$dir"
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    start_rank $(rank_ns_alt $r) "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 ZCC_ALGO=ring ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=TUNING \
      "$DRIVER" --rank $r --nranks 4 --id-file "$dir/id" --seed "$SEED" --mode check --sizes small
    pids+=("$LAST_PID")
  done
  for r in 0 1 2 3; do
    wait_pid "${pids[$r]}" 300
    st=$?
    collect "$dir/rank$r.log" $st "interleave rank $r"
    expect_line "$dir/rank$r.log" "host ring 0 2 1 3 \\(2 host crossing\\(s\\), 2 host\\(s\\)\\)" \
      "interleave rank $r: no 'host ring 0 2 1 3 (2 host crossing(s), 2 host(s))' in its log:" \
      "host ring"
  done
}

# phase_hier: the hierarchical allreduce (ZCC_ALGO=hier), 4 ranks with
# ranks 0 and 2 in A, 1 and 3 in B (so the groups are not rank ranges),
# 64 KiB chunks (the 1 MiB case runs 17), exact; every rank's log names the
# plan, in its rails' form (1 MiB) and its leaders' (1 element), the
# broadcasts' and reduces' (through the root's rank on each host), the
# allgathers' and reduce-scatters' (the rails, and directly inside each
# host). Then 3
# ranks (2 in A, 1 in B), which cannot run it: every collective but the
# all-pairs ones is refused at the call, naming why, and those pass after
# the refusals.
phase_hier() {
  local dir=$WORK/hier pids=() r st want small
  mkdir -p "$dir"
  want="via hier, [0-9]+ steps, inside each host \\(2 ranks\\), over the rails across 2 hosts"
  small="via hier, [0-9]+ steps, summed by each host's leader \\(2 ranks a host\\), exchanged between the 2 hosts' leaders"
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    start_rank $(rank_ns_alt $r) "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 ZCC_ALGO=hier ZCC_RING_CHUNK_BYTES=65536 ZCC_DEBUG=INFO \
      ZCC_DEBUG_SUBSYS=COLL "$DRIVER" --rank $r --nranks 4 --id-file "$dir/id" \
      --seed "$SEED" --mode check
    pids+=("$LAST_PID")
  done
  for r in 0 1 2 3; do
    wait_pid "${pids[$r]}" 400
    st=$?
    collect "$dir/rank$r.log" $st "hier rank $r"
    expect_line "$dir/rank$r.log" "allreduce: 1048579 elements of float32 \\(sum\\) on 4 ranks $want" \
      "hier rank $r: no allreduce line '... $want' in its log:"
    # small sizes: the leaders' form
    expect_line "$dir/rank$r.log" "allreduce: 1 elements of float32 \\(sum\\) on 4 ranks $small" \
      "hier rank $r: no allreduce line '... $small' in its log:"
    # broadcast and reduce through the root's rank on each host
    for c in broadcast reduce; do
      expect_line "$dir/rank$r.log" "$c: 4097 elements of float32 \\(sum\\) on 4 ranks via hier, [0-9]+ steps, through the root's rank on each of the 2 hosts" \
        "hier rank $r: no $c line '... via hier ... through the root's rank' in its log:" "$c: "
    done
    # allgather over the rails, then inside the host; reduce-scatter the mirror
    expect_line "$dir/rank$r.log" "allgather: [0-9]+ elements of [a-z0-9]+ .*on 4 ranks via hier, [0-9]+ steps, over the rails across 2 hosts, then directly inside each host \\(2 ranks\\)" \
      "hier rank $r: no allgather line '... via hier ... over the rails' in its log:" "allgather: "
    expect_line "$dir/rank$r.log" "reducescatter: [0-9]+ elements of [a-z0-9]+ .*on 4 ranks via hier, [0-9]+ steps, directly inside each host \\(2 ranks\\), then over the rails across 2 hosts" \
      "hier rank $r: no reducescatter line '... via hier ... inside each host' in its log:" "reducescatter: "
  done
  dir=$WORK/hier-uneven
  mkdir -p "$dir"
  pids=()
  for r in 0 1 2; do
    # shellcheck disable=SC2046
    start_rank $(rank_ns $((r == 2 ? 2 : r))) "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 ZCC_ALGO=hier "$DRIVER" --rank $r --nranks 3 --id-file "$dir/id" \
      --seed "$SEED" --mode check --sizes small
    pids+=("$LAST_PID")
  done
  for r in 0 1 2; do
    wait_pid "${pids[$r]}" 300
    st=$?
    local line others refused
    line=$(grep -E '^net_driver rank [0-9]+: [0-9]+ passed, [0-9]+ failed' "$dir/rank$r.log" | tail -1)
    refused=$(grep -c "FAIL: .*ZCC_ALGO=hier: this host communicator (3 ranks, 2 hosts) cannot run it (hier needs the same number of ranks on every host, at least 2 (here 1 to 2))" "$dir/rank$r.log")
    others=$(grep "FAIL: " "$dir/rank$r.log" | grep -v "FAIL: (more failures" |
             grep -vc "ZCC_ALGO=hier: this host communicator (3 ranks, 2 hosts) cannot run it (hier needs")
    if [ "$st" -ne 124 ] && [ "$refused" -gt 0 ] && [ "$others" -eq 0 ] &&
       echo "$line" | grep -qE ': [1-9][0-9]* passed, [1-9][0-9]* failed'; then
      # refused at the call, nothing sent: all-to-all and send/receive (all-pairs
      # by nature, which a forced name leaves alone) pass after the refusals
      pass
    else
      fail "hier-uneven rank $r: expected every refusal to name why, and the all-pairs cases to pass (status $st, $refused refused, $others other failures, '$line'):"
      grep -m3 "FAIL" "$dir/rank$r.log" | sed "s/^/  /"
    fi
  done
}

# phase_fault NAME: start 4 looping ranks, make the fault, check them
phase_fault() {
  local name=$1 dir=$WORK/$PHASE_TAG$1 pids=() r st
  mkdir -p "$dir"
  for r in 0 1 2 3; do
    # shellcheck disable=SC2046
    start_rank $(rank_ns $r) "$dir/rank$r.log" \
      ZCC_TIMEOUT=$FAULT_TIMEOUT_MS "$DRIVER" --rank $r --nranks 4 --id-file "$dir/id" \
      --seed "$SEED" --mode fault --dir "$dir"
    pids+=("$LAST_PID")
  done
  local deadline=$(( $(date +%s) + 120 )) ready=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    ready=$(ls "$dir"/ready.* 2>/dev/null | wc -l)
    [ "$ready" -ge 4 ] && break
    sleep 0.05
  done
  if [ "$ready" -lt 4 ]; then
    fail "$name: only $ready of 4 ranks completed two allreduces within 120 s"
  fi
  "$DRIVER" --now >"$dir/fault_time.tmp" && mv "$dir/fault_time.tmp" "$dir/fault_time"
  if [ "$name" = linkdown ]; then
    log "$name: setting $VA down"
    ip -n "$NSA" link set "$VA" down
  else
    log "$name: SIGKILL ranks 2 and 3 (namespace $NSB)"
    kill -9 "${pids[2]}" "${pids[3]}"
  fi
  local limit=$(( FAULT_TIMEOUT_MS / 1000 + 2 + 20 ))
  for r in 0 1 2 3; do
    wait_pid "${pids[$r]}" $limit
    st=$?
    if [ "$name" = kill ] && [ "$r" -ge 2 ]; then
      if [ "$st" -eq 137 ]; then pass; else fail "$name: rank $r: expected death by SIGKILL (137), got $st"; fi
      continue
    fi
    if [ "$st" -eq 124 ]; then
      fail "$name: rank $r still running ${limit} s after the fault; killed"
      tail -5 "$dir/rank$r.log" | sed "s/^/  /"
      continue
    fi
    collect "$dir/rank$r.log" $st "$name rank $r"
  done
  if [ "$name" = linkdown ]; then
    ip -n "$NSA" link set "$VA" up
  fi
}

# phase_heartbeat: the link goes down under a long ZCC_TIMEOUT; the heartbeat finds it
phase_heartbeat() {
  local saved=$FAULT_TIMEOUT_MS tag=$PHASE_TAG
  local env_saved=("${RANK_ENV[@]}")
  FAULT_TIMEOUT_MS=60000
  RANK_ENV+=(ZCC_HEARTBEAT_MS=500 ZCC_TEST_FAULT_LIMIT_S=5)
  PHASE_TAG="${tag}hb-"
  phase_fault linkdown
  FAULT_TIMEOUT_MS=$saved
  RANK_ENV=("${env_saved[@]}")
  PHASE_TAG=$tag
}

# phase_net PLUGIN: check, linkdown, heartbeat and kill over the net transport
phase_net() {
  local plugin=$1 r peer
  RANK_ENV=(ZCC_NET_PLUGIN="$plugin" ZCC_DEBUG=INFO ZCC_DEBUG_SUBSYS=INIT,NET)
  if [ "$plugin" = ib ]; then
    if [ -z "${ZCC_TEST_FAKEVERBS:-}" ] || [ ! -f "$ZCC_TEST_FAKEVERBS" ]; then
      fail "net-ib: ZCC_TEST_FAKEVERBS does not name libzcc_fakeverbs.so (got '${ZCC_TEST_FAKEVERBS:-}')"
      RANK_ENV=()
      return
    fi
    RANK_ENV+=(ZCC_IBV_LIBRARY="$ZCC_TEST_FAKEVERBS")
  fi
  PHASE_TAG="net-$plugin-"
  phase_check
  # every pair across the namespaces connected through the plug-in
  for r in 0 1 2 3; do
    for peer in 0 1 2 3; do
      [ $((r / 2)) -eq $((peer / 2)) ] && continue
      if grep -q "rank $r -> rank $peer (.*) via net" "$WORK/${PHASE_TAG}check/rank$r.log"; then
        pass
      else
        fail "net-$plugin: rank $r's log does not say that it reached rank $peer via net:"
        grep " via " "$WORK/${PHASE_TAG}check/rank$r.log" | sed "s/^/  /"
      fi
    done
  done
  grep -h -m1 "net transport: plug-in" "$WORK/${PHASE_TAG}check/rank0.log" | sed "s/^/  /"
  phase_fault linkdown
  phase_heartbeat
  phase_fault kill
  RANK_ENV=()
  PHASE_TAG=
}

for phase in $PHASES; do
  log "--- phase $phase"
  case $phase in
    check) phase_check ;;
    interleave) phase_interleave ;;
    hier) phase_hier ;;
    env) phase_env ;;
    linkdown) phase_fault linkdown ;;
    heartbeat) phase_heartbeat ;;
    kill) phase_fault kill ;;
    net-socket) phase_net socket ;;
    net-ib) phase_net ib ;;
    *) fail "unknown phase $phase" ;;
  esac
done

log "$PASSED passed, $FAILED failed, 0 skipped"
[ "$FAILED" -eq 0 ]
