#!/usr/bin/env bash
# Several "hosts" on one machine: network namespaces zcc-hH-PID (H = 0 ..
# ZCC_TEST_HOSTS - 1, default 4), each with a veth into one bridge that lives
# in a namespace of its own (zcc-br-PID), addresses 10.78.0.(H+1)/24, each
# rank with its own UTS namespace and the host's name; ZCC_TEST_RANKS_PER_HOST
# ranks in each (default 4: 16 ranks).
#
#   phase init      every rank calls zccCommInitRank at one common time (each
#                   waits for it once the unique id is there); the slowest
#                   rank's init must end within ZCC_TEST_INIT_LIMIT_S (default
#                   1.0 s) of that time; then the check cases (small sizes),
#                   exact, over the default transports (socket between hosts)
#   phase init-net  the same over the net transport with the socket plug-in
#   phase init-ib   the same with the ib plug-in on the fake verbs provider
#                   (ZCC_TEST_FAKEVERBS: the path of libzcc_fakeverbs.so)
#   phase hier      the check cases (small sizes) with ZCC_ALGO=hier: every
#                   collective but all-to-all and send/receive hierarchical
#                   (rings inside the hosts and across them; the rails and
#                   a direct round inside the hosts), exact, every log
#                   naming the plans
#
# Usage: many_hosts.sh /path/to/net_driver
# Skips (exit 0, "0 passed, 0 failed, 1 skipped") without the privileges to
# create namespaces, veth pairs and a bridge. Cleans up on every exit.
# ZCC_TEST_MANY_PHASES="init" a subset; ZCC_TEST_KEEP=1 keeps the logs.
set -u

DRIVER=${1:-}
NAME=many_hosts
PASSED=0
FAILED=0
TAG=$$
PIDS=()
WORK=
RANK_ENV=()
UTS=1
NH=${ZCC_TEST_HOSTS:-4}
RPH=${ZCC_TEST_RANKS_PER_HOST:-4}
LIMIT=${ZCC_TEST_INIT_LIMIT_S:-1.0}
BR=zcc-br-$TAG
NSS=()
# shellcheck source=ns_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/ns_lib.sh"

cleanup() {
  local p ns
  for p in "${PIDS[@]}"; do
    kill -9 "$p" 2>/dev/null
  done
  for ns in "${NSS[@]}"; do
    ip netns del "$ns" 2>/dev/null
  done
  ip netns del "$BR" 2>/dev/null
  remove_work
}
ns_begin "$DRIVER" zcc-many-hosts
if ! ip netns add "$BR" 2>"$WORK/err"; then
  skip "cannot create a network namespace ($(tr '\n' ' ' <"$WORK/err")); needs root or CAP_SYS_ADMIN"
fi
if ! ip -n "$BR" link add zbr type bridge 2>"$WORK/err"; then
  skip "cannot create a bridge ($(tr '\n' ' ' <"$WORK/err"))"
fi
ip -n "$BR" link set zbr up
for ((h = 0; h < NH; h++)); do
  ns=zcc-h$h-$TAG
  NSS+=("$ns")
  if ! ip netns add "$ns" 2>"$WORK/err" ||
     ! ip link add "zh${h}n$TAG" type veth peer name "zh${h}b$TAG" 2>>"$WORK/err"; then
    skip "cannot create namespace $ns and its veth ($(tr '\n' ' ' <"$WORK/err"))"
  fi
  set -e
  ip link set "zh${h}b$TAG" netns "$BR"
  ip -n "$BR" link set "zh${h}b$TAG" master zbr
  ip -n "$BR" link set "zh${h}b$TAG" up
  ns_link_up "$ns" "zh${h}n$TAG" "10.78.0.$((h + 1))"
  set +e
done
unshare --uts true 2>/dev/null || { UTS=0; log "note: unshare --uts is not available; the namespaces share a hostname"; }
SEED=${ZCC_TEST_SEED:-$(( (RANDOM << 15) ^ RANDOM ^ TAG ))}
N=$((NH * RPH))
log "$NH namespaces on bridge zbr (in $BR), $RPH ranks each; seed $SEED"

phase_init() { # VARIANT: default, net or ib
  local v=$1 dir=$WORK/init-$1 pids=() r h st t now max
  mkdir -p "$dir"
  case $v in
    net) RANK_ENV=(ZCC_NET_PLUGIN=socket) ;;
    ib)
      if [ -z "${ZCC_TEST_FAKEVERBS:-}" ] || [ ! -f "$ZCC_TEST_FAKEVERBS" ]; then
        fail "init-ib: ZCC_TEST_FAKEVERBS does not name the fake verbs provider"
        return
      fi
      RANK_ENV=(ZCC_IBV_LIBRARY="$ZCC_TEST_FAKEVERBS") ;;
    *) RANK_ENV=() ;;
  esac
  for ((r = 0; r < N; r++)); do
    h=$((r / RPH))
    start_rank "zcc-h$h-$TAG" "zcc-host-$h" "zh${h}n$TAG" "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 "$DRIVER" --rank $r --nranks $N --id-file "$dir/id" --seed "$SEED" \
      --mode init --dir "$dir" --sizes small
    pids+=("$LAST_PID")
  done
  # Every rank has the unique id and waits: then the common start, 0.5 s ahead.
  t=$(date +%s)
  while [ "$(find "$dir" -name 'waiting.*' | wc -l)" -lt $N ]; do
    if [ $(( $(date +%s) - t )) -gt 60 ]; then
      fail "init-$v: only $(find "$dir" -name 'waiting.*' | wc -l) of $N ranks were ready after 60 s"
      break
    fi
    sleep 0.05
  done
  now=$("$DRIVER" --now)
  awk -v t="$now" 'BEGIN { printf "%.6f\n", t + 0.5 }' > "$dir/start.tmp" && mv "$dir/start.tmp" "$dir/start"
  for ((r = 0; r < N; r++)); do
    wait_pid "${pids[$r]}" 300
    st=$?
    collect "$dir/rank$r.log" $st "init-$v rank $r"
  done
  max=$(grep -h -E '^net_driver rank [0-9]+: init [0-9.]+ s' "$dir"/rank*.log |
        awk '{ if ($5 > m) m = $5; n++ } END { printf "%s %.3f", n + 0, m }')
  if [ "${max%% *}" -ne $N ]; then
    fail "init-$v: ${max%% *} of $N ranks reported their init time"
  elif awk -v m="${max#* }" -v l="$LIMIT" 'BEGIN { exit !(m < l) }'; then
    pass
    log "init-$v: $N ranks on $NH namespaces: the slowest init ended ${max#* } s after the common start (limit $LIMIT s)"
  else
    fail "init-$v: the slowest of $N ranks took ${max#* } s from the common start; the limit is $LIMIT s"
  fi
  RANK_ENV=()
}

# phase_hier: ZCC_ALGO=hier on every rank (NH hosts of RPH ranks: rings of
# RPH inside the hosts and NH across them), the check cases (small sizes)
# exact, 4 KiB chunks (the 4097-element cases run several); every rank's
# log names the plan: the rails' form at 4097 float64 elements, the leaders' at 1,
# broadcast and reduce through the root's rank on each host, allgather and
# reduce-scatter over the rails and directly inside the hosts
phase_hier() {
  local dir=$WORK/hier pids=() r h st
  mkdir -p "$dir"
  for ((r = 0; r < N; r++)); do
    h=$((r / RPH))
    start_rank "zcc-h$h-$TAG" "zcc-host-$h" "zh${h}n$TAG" "$dir/rank$r.log" \
      ZCC_TIMEOUT=60000 ZCC_ALGO=hier ZCC_RING_CHUNK_BYTES=4096 ZCC_DEBUG=INFO \
      ZCC_DEBUG_SUBSYS=COLL "$DRIVER" --rank $r --nranks $N --id-file "$dir/id" \
      --seed "$SEED" --mode check --sizes small
    pids+=("$LAST_PID")
  done
  for ((r = 0; r < N; r++)); do
    wait_pid "${pids[$r]}" 300
    st=$?
    collect "$dir/rank$r.log" $st "hier rank $r"
    expect_line "$dir/rank$r.log" "allreduce: 4097 elements of float64 \\(sum\\) on $N ranks via hier, [0-9]+ steps, inside each host \\($RPH ranks\\), over the rails across $NH hosts" \
      "hier rank $r: its log does not name the hierarchical plan's rails:"
    expect_line "$dir/rank$r.log" "allreduce: 1 elements of float32 \\(sum\\) on $N ranks via hier, [0-9]+ steps, summed by each host's leader \\($RPH ranks a host\\), exchanged between the $NH hosts' leaders" \
      "hier rank $r: its log does not name the leaders' form for 1 element:"
    for c in broadcast reduce; do
      expect_line "$dir/rank$r.log" "$c: 4097 elements of float32 \\(sum\\) on $N ranks via hier, [0-9]+ steps, through the root's rank on each of the $NH hosts" \
        "hier rank $r: its log does not name the hierarchical $c:" "$c: "
    done
    expect_line "$dir/rank$r.log" "allgather: [0-9]+ elements of [a-z0-9]+ .*on $N ranks via hier, [0-9]+ steps, over the rails across $NH hosts, then directly inside each host \\($RPH ranks\\)" \
      "hier rank $r: its log does not name the hierarchical allgather:" "allgather: "
    expect_line "$dir/rank$r.log" "reducescatter: [0-9]+ elements of [a-z0-9]+ .*on $N ranks via hier, [0-9]+ steps, directly inside each host \\($RPH ranks\\), then over the rails across $NH hosts" \
      "hier rank $r: its log does not name the hierarchical reduce-scatter:" "reducescatter: "
  done
}

for phase in ${ZCC_TEST_MANY_PHASES:-init init-net init-ib hier}; do
  log "--- phase $phase"
  case $phase in
    init) phase_init default ;;
    init-net) phase_init net ;;
    init-ib) phase_init ib ;;
    hier) phase_hier ;;
    *) fail "unknown phase $phase" ;;
  esac
done

log "$PASSED passed, $FAILED failed, 0 skipped"
[ "$FAILED" -eq 0 ]
