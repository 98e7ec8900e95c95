# Helpers of the network-namespace tests (two_host.sh, many_hosts.sh) and of
# scripts/net_perf.sh, sourced.
# The caller sets NAME (the prefix of its messages), PASSED, FAILED, PIDS (ranks
# started, killed on exit), RANK_ENV (more variables for every rank) and UTS (1:
# each rank gets its own UTS namespace and hostname).

log() { echo "$NAME: $*"; }
pass() { PASSED=$((PASSED + 1)); }
fail() {
  FAILED=$((FAILED + 1))
  log "FAIL: $*"
}
skip() {
  log "SKIP: $*"
  log "0 passed, 0 failed, 1 skipped"
  exit 0
}

# start_rank NS HOST IFNAME LOG COMMAND...: start one rank in the background
start_rank() {
  local ns=$1 host=$2 ifname=$3 log=$4
  shift 4
  local env=(env ZCC_SOCKET_IFNAME="=$ifname" ZCC_HOSTNAME="$host" ZCC_DEVICE=host "${RANK_ENV[@]}")
  if [ "$UTS" = 1 ]; then
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" \
      "${env[@]}" "$@" >"$log" 2>&1 &
  else
    ip netns exec "$ns" "${env[@]}" "$@" >"$log" 2>&1 &
  fi
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_pid PID DEADLINE_S: exit status, or 124 after killing it at the deadline
wait_pid() {
  local pid=$1 deadline=$(( $(date +%s) + $2 ))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.05
  done
  # (stderr: bash's "Killed" notice for the ranks this script killed on purpose)
  wait "$pid" 2>/dev/null
}

# collect LOG STATUS WHAT: add the rank's counts; check its exit
collect() {
  local logf=$1 st=$2 what=$3 line p f
  grep -E 'FAIL|SKIP|after the fault' "$logf" | sed "s/^/  /"
  line=$(grep -E '^net_driver rank [0-9]+: [0-9]+ passed, [0-9]+ failed' "$logf" | tail -1)
  if [ -z "$line" ]; then
    fail "$what: no result line (exit status $st); last lines:"
    tail -5 "$logf" | sed "s/^/  /"
    return
  fi
  p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
  if [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then
    fail "$what: exit status $st"
  fi
  log "$what: $line"
}


# The end of every cleanup: the logs, kept with ZCC_TEST_KEEP=1.
remove_work() {
  if [ -n "$WORK" ]; then
    if [ -n "${ZCC_TEST_KEEP:-}" ]; then log "logs kept in $WORK"; else rm -rf "$WORK"; fi
  fi
}

# ns_begin DRIVER PREFIX: the traps (the caller's cleanup on exit), the driver
# and ip checks, and WORK, a new folder /tmp/PREFIX.XXXXXX.
ns_begin() {
  trap cleanup EXIT
  trap 'log "interrupted"; exit 130' INT TERM HUP
  if [ -z "$1" ] || [ ! -x "$1" ]; then
    log "FAIL: no net_driver executable given (got '$1')"
    log "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
  command -v ip >/dev/null 2>&1 || skip "iproute2's ip command is not installed"
  WORK=$(mktemp -d "/tmp/$2.XXXXXX") || { log "FAIL: mktemp"; exit 1; }
}

# ns_link_up NS IF ADDR: move interface IF into namespace NS, give it ADDR/24,
# and bring it and NS's loopback up. Non-zero at the first step that fails.
ns_link_up() {
  ip link set "$2" netns "$1" &&
    ip -n "$1" addr add "$3/24" dev "$2" &&
    ip -n "$1" link set lo up &&
    ip -n "$1" link set "$2" up
}

# The benchmark scripts' two hosts (scripts/net_perf.sh, hier_perf.sh), from
# NSA NSB VA VB IPA IPB: both namespaces, a veth pair between them, its ends
# up with their addresses; the cleanup that undoes it on exit. Exits at the
# first step that fails.
ns_pair_begin() {
  ns_pair_cleanup() {
    ip netns del "$NSA" 2>/dev/null
    ip netns del "$NSB" 2>/dev/null
    ip link del "$VA" 2>/dev/null
  }
  trap ns_pair_cleanup EXIT
  ip netns add "$NSA" && ip netns add "$NSB" &&
    ip link add "$VA" type veth peer name "$VB" &&
    ns_link_up "$NSA" "$VA" "$IPA" && ns_link_up "$NSB" "$VB" "$IPB" ||
    { echo "cannot make the namespaces and their veth pair"; exit 1; }
}

# ns_perf_info ROOT: where and when a benchmark ran (its info.txt lines)
ns_perf_info() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git -C "$1" rev-parse --short HEAD 2>/dev/null)"
  echo "kernel: $(uname -r); cpus: $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# expect_line LOG ERE WHAT [SHOW]: pass if LOG has a line matching the
# extended regular expression, else fail with WHAT and LOG's first lines
# matching SHOW (default "allreduce: ")
expect_line() {
  if grep -qE -- "$2" "$1"; then
    pass
  else
    fail "$3"
    grep -m3 -- "${4:-allreduce: }" "$1" | sed "s/^/  /"
  fi
}
