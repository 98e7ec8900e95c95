#!/usr/bin/env bash
# Python tests: the ctypes shim, the torch.distributed backend "zcc", the DDP
# hook and examples/ddp_train.py, with pytest on Debian's python3-torch.
# Builds build/src/libzcc.so first when it is missing (host-only configure if
# build/ does not exist yet), then runs
#   /usr/bin/python3 -m pytest -q tests/python
# with ZCC_LIBRARY pointing at it. pytest's exit 5 (no tests collected) is
# an error here. Extra arguments go to pytest (scripts/test_python.sh -k dist).
# Environment: ZCC_PYTHON (default /usr/bin/python3: the interpreter that
# Debian's python3-torch belongs to), ZCC_LIBRARY (use that library instead).
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

status=0
"$py" -m pytest -q -rs -p no:cacheprovider tests/python "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test_python: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
