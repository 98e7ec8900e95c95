#!/usr/bin/env bash
# check_exports.sh LIB LIST: LIB (zcc's libnccl.so.2) exports every symbol
# named in LIST (one a line, '#' comments) and nothing that is not nccl*;
# its SONAME is libnccl.so.2. On a GPU host, LIST may be made on the spot
# from libtorch_cuda.so (scripts/gpu_run.sh nccl).
set -euo pipefail
lib=$1
list=$2
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWiV]$/ {print $3}' | sort -u)
status=0
missing=$(grep -v '^#' "$list" | sed '/^$/d' | sort -u | comm -23 - <(echo "$have"))
if [ -n "$missing" ]; then
  echo "check_exports: $lib lacks:" $missing >&2
  status=1
fi
extra=$(echo "$have" | grep -v '^nccl' || true)
if [ -n "$extra" ]; then
  echo "check_exports: $lib exports symbols outside nccl*:" $extra >&2
  status=1
fi
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [ "$soname" != libnccl.so.2 ]; then
  echo "check_exports: SONAME is '$soname', expected libnccl.so.2" >&2
  status=1
fi
n=$(grep -v '^#' "$list" | sed '/^$/d' | sort -u | wc -l)
[ $status -eq 0 ] && echo "check_exports: all $n symbols of $(basename "$list") exported; only nccl*; SONAME libnccl.so.2"
exit $status
