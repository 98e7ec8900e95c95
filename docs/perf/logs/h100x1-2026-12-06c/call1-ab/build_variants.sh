#!/usr/bin/env bash
set -e
cd /tmp/wt
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DZCC_ENABLE_CUDA=ON >/dev/null
mkdir -p /work/main/.abcarry
for v in ${VARIANTS:-nostamp entryonly clk clknobar}; do
  python3 /tmp/variants.py $v
  t0=$(date +%s)
  cmake --build build-gpu -j2 --target zcc >/tmp/wt-build-$v.log 2>&1
  gzip -c build-gpu/src/libzcc.so.0 > /work/main/.abcarry/libzcc-$v.so.gz
  echo "$v built in $(( $(date +%s) - t0 )) s"
done
cp /tmp/flags.cuh.orig src/device/flags.cuh
echo done
