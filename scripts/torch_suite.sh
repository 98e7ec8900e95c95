#!/usr/bin/env bash
# PyTorch's own distributed test suite on backend "zcc", CPU tensors
# (tests/python/dist_suite.py): DistributedTest at 2 and 3 ranks, then its
# subgroup tests (names with "group") at 8 ranks. One pytest run per world
# size; prints each run's closing line and every skip's reason (-rsx), then
# a last line "N passed, N failed, N skipped" over all of them. Exits
# non-zero if any run failed or collected nothing.
# torch's suite imports expecttest, which Debian does not package: when the
# interpreter lacks it, pip puts it in .deps/python (git-ignored) first.
# Environment: ZCC_PYTHON (default /usr/bin/python3), ZCC_LIBRARY (default
# build/src/libzcc.so, which must exist), ZCC_SUITE_RUNS (default
# "2 3 8:group": world sizes, each with an optional pytest -k expression),
# ZCC_SUITE_LOGS (directory for the logs; default build/torch-suite).
# Extra arguments go to every pytest run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=${ZCC_PYTHON:-/usr/bin/python3}
export ZCC_LIBRARY=${ZCC_LIBRARY:-$root/build/src/libzcc.so}
runs=${ZCC_SUITE_RUNS:-"2 3 8:group"}
logs=${ZCC_SUITE_LOGS:-$root/build/torch-suite}

if [ ! -f "$ZCC_LIBRARY" ]; then
  echo "torch_suite: $ZCC_LIBRARY was not built" >&2
  exit 1
fi
if ! "$py" -c 'import expecttest' 2>/dev/null; then
  deps=$root/.deps/python
  export PYTHONPATH=$deps${PYTHONPATH:+:$PYTHONPATH}
  if ! "$py" -c 'import expecttest' 2>/dev/null; then
    echo "torch_suite: installing expecttest (torch's suite imports it) into $deps"
    "$py" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
      --target "$deps" expecttest==0.3.0
  fi
fi
mkdir -p "$logs"

total_p=0 total_f=0 total_s=0 status=0
# count LOG: the passed, failed (failed + errors) and skipped (skipped +
# xfailed: see tests/python/conftest.py) of pytest's closing line.
count() {
  local line
  line=$(grep -E '^=* *[0-9]+ (passed|failed|skipped|error)' "$1" | tail -n 1 || true)
  local p f s
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  f=$({ grep -oE '[0-9]+ (failed|errors?)' <<<"$line" || true; } | awk '{s += $1} END {print s + 0}')
  s=$({ grep -oE '[0-9]+ (skipped|xfailed)' <<<"$line" || true; } | awk '{s += $1} END {print s + 0}')
  echo "$p $f $s"
}

for run in $runs; do
  n=${run%%:*}
  k=
  [ "$run" != "$n" ] && k=${run#*:}
  log=$logs/np$n.log
  echo "==== torch_suite: $n ranks${k:+, tests matching '$k'}"
  t0=$(date +%s)
  rc=0
  WORLD_SIZE=$n TEMP_DIR= "$py" -m pytest -q -rsx -p no:cacheprovider tests/python/dist_suite.py \
    ${k:+-k "$k"} "$@" >"$log" 2>&1 || rc=$?
  grep -E '^(SKIPPED|XFAIL|FAILED|ERROR)' "$log" || true
  read -r p f s < <(count "$log")
  tail -n 1 "$log"
  echo "torch_suite: $n ranks: $p passed, $f failed, $s skipped in $(($(date +%s) - t0))s (log $log)"
  if [ "$rc" -eq 5 ] || [ "$((p + f + s))" -eq 0 ]; then
    echo "torch_suite: $n ranks: pytest collected no tests" >&2
    rc=1
  fi
  [ "$rc" -ne 0 ] && status=1
  total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
done
echo "$total_p passed, $total_f failed, $total_s skipped"
exit "$status"
