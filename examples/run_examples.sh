#!/usr/bin/env bash
# Start the launcher examples the way a user would, with 2 ranks on this host:
#   example_mpi       under mpirun, rendezvous at ZCC_COMM_ID=127.0.0.1:PORT
#   example_torchrun  as 2 background processes with torchrun's variables
#                     (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) set by hand
#   example_split     one process, 4 host communicators split in two
# Usage: examples/run_examples.sh [DIR holding the example binaries]
# (default: build/examples). ZCC_MPIRUN names the mpirun to use.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bindir=$(cd "${1:-$here/../build/examples}" && pwd)
mpirun=${ZCC_MPIRUN:-$(command -v mpirun || true)}
nranks=2
limit=120 # seconds for each example
passed=0
failed=0
skipped=0

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
  else
    local port
    while :; do
      port=$((20000 + RANDOM % 30000))
      if ! ss -Htln "sport = :$port" 2>/dev/null | grep -q .; then
        echo "$port"
        return
      fi
    done
  fi
}

result() { # name status
  if [ "$2" -eq 0 ]; then
    echo "== $1: passed"
    passed=$((passed + 1))
  else
    echo "== $1: FAILED (exit status $2)"
    failed=$((failed + 1))
  fi
}

for exe in example_mpi example_torchrun example_split; do
  if [ ! -x "$bindir/$exe" ]; then
    echo "run_examples: $bindir/$exe not found; build the examples first" >&2
    exit 1
  fi
done

# mpirun: one process per rank; no MPI library in the program.
if [ -n "$mpirun" ]; then
  port=$(free_port)
  echo "== example_mpi: $mpirun -np $nranks, ZCC_COMM_ID=127.0.0.1:$port"
  status=0
  ZCC_COMM_ID=127.0.0.1:$port timeout -k 10 "$limit" \
    "$mpirun" --allow-run-as-root --oversubscribe -np "$nranks" \
    -x ZCC_COMM_ID "$bindir/example_mpi" || status=$?
  result example_mpi "$status"
else
  echo "== example_mpi: skipped (mpirun not found; apt-get install openmpi-bin)"
  skipped=$((skipped + 1))
fi

# torchrun's variables by hand. zcc meets at MASTER_PORT + 1 (torchrun's own
# store would hold MASTER_PORT), so MASTER_PORT is one below a free port.
port=$(free_port)
echo "== example_torchrun: $nranks processes, MASTER_ADDR=127.0.0.1" \
  "MASTER_PORT=$((port - 1))"
pids=()
for ((rank = 0; rank < nranks; rank++)); do
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$nranks LOCAL_WORLD_SIZE=$nranks \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port - 1)) \
    timeout -k 10 "$limit" "$bindir/example_torchrun" &
  pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done
result example_torchrun "$status"

echo "== example_split: 4 host communicators, split into even and odd"
status=0
timeout -k 10 "$limit" "$bindir/example_split" || status=$?
result example_split "$status"

echo "run_examples: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
