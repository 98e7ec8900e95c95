#!/usr/bin/env bash
# Build zcc and run the allreduce benchmark on host communicators with 2
# ranks on this machine, 8 B to 128 MB:
#   build/tools/allreduce_perf -np 2 -b 8 -e 128M -f 2 [your options]
# Options given to this script are passed on and win over these (for
# example -np 4, -e 1G, -d float, --json results.json). ZCC_DEVICE picks the
# device (default here: host); missing packages are installed first.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

"$root/scripts/deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZCC_ENABLE_CUDA="${ZCC_ENABLE_CUDA:-AUTO}" -DZCC_SANITIZE=
cmake --build "$root/build" -j"$(nproc)" --target allreduce_perf

export ZCC_DEVICE=${ZCC_DEVICE:-host}
echo "bench: ZCC_DEVICE=$ZCC_DEVICE build/tools/allreduce_perf -np 2 -b 8 -e 128M -f 2 $*"
exec "$root/build/tools/allreduce_perf" -np 2 -b 8 -e 128M -f 2 "$@"
