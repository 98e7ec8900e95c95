#!/usr/bin/env bash
# Python tests: the ctypes shim, the torch.distributed backend "zcc", the DDP
# hook and the examples, with pytest on Debian's python3-torch.
# Builds build/src/libzcc.so first when it is missing (host-only configure if
# build/ does not exist yet), then runs
#   /usr/bin/python3 -m pytest -q tests/python
# with ZCC_LIBRARY pointing at it, then torch's own distributed suite on
# backend zcc (scripts/torch_suite.sh: 2, 3 and 8 ranks), and ends with the
# line "N passed, N failed, N skipped" over both. pytest's exit 5 (no tests
# collected) is an error here. Extra arguments go to pytest
# (scripts/test_python.sh -k dist) and leave the suite out.
# Environment: ZCC_PYTHON (default /usr/bin/python3: the interpreter that
# Debian's python3-torch belongs to), ZCC_LIBRARY (use that library instead),
# ZCC_TORCH_SUITE (1: run torch's suite, 0: not; default 1 without extra
# arguments, else 0), and scripts/torch_suite.sh's ZCC_SUITE_RUNS.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=${ZCC_PYTHON:-/usr/bin/python3}

if [ -z "${ZCC_LIBRARY:-}" ]; then
  if [ ! -f build/CMakeCache.txt ]; then
    cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  cmake --build "$root/build" -j"$(nproc)" --target zcc
  export ZCC_LIBRARY=$root/build/src/libzcc.so
fi
if [ ! -f "$ZCC_LIBRARY" ]; then
  echo "test_python: $ZCC_LIBRARY was not built" >&2
  exit 1
fi
for mod in torch pytest; do
  if ! "$py" -c "import $mod" 2>/dev/null; then
    echo "test_python: $py cannot import $mod (apt-get install python3-torch python3-pytest)" >&2
    exit 1
  fi
done
"$py" -c 'import torch; print("test_python: torch", torch.__version__, "| cuda", torch.cuda.is_available())'
echo "test_python: ZCC_LIBRARY=$ZCC_LIBRARY"

suite=${ZCC_TORCH_SUITE:-$([ "$#" -eq 0 ] && echo 1 || echo 0)}
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

status=0
"$py" -m pytest -q -rs -p no:cacheprovider tests/python "$@" 2>&1 | tee "$logdir/pytest.log" ||
  status=$?
if [ "$status" -eq 5 ]; then
  echo "test_python: pytest collected no tests" >&2
  exit 1
fi
if [ "$suite" != 1 ]; then
  exit "$status"
fi

# The suite's closing line: "N passed, N failed, N skipped".
suite_status=0
ZCC_PYTHON=$py "$root/scripts/torch_suite.sh" 2>&1 | tee "$logdir/suite.log" ||
  suite_status=$?
num() { { grep -oE "[0-9]+ $2" <<<"$1" || echo 0; } | grep -oE '^[0-9]+'; }
a=$(grep -E '^=* *[0-9]+ (passed|failed|skipped|error)' "$logdir/pytest.log" | tail -n 1 || true)
b=$(tail -n 1 "$logdir/suite.log")
e=$({ grep -oE '[0-9]+ errors?' <<<"$a" || echo 0; } | grep -oE '^[0-9]+')
echo "test_python: tests/python: ${a:-no closing line}"
echo "test_python: torch's suite: $b"
echo "$(($(num "$a" passed) + $(num "$b" passed))) passed," \
  "$(($(num "$a" failed) + e + $(num "$b" failed))) failed," \
  "$(($(num "$a" skipped) + $(num "$b" skipped))) skipped"
[ "$status" -ne 0 ] && exit "$status"
exit "$suite_status"
