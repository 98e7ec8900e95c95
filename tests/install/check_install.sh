#!/usr/bin/env bash
# Install the build into a scratch prefix, then build a program against it
# twice, as a user would: with find_package(zcc) and with pkg-config zcc.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(dirname "$(find "$work/prefix" -name 'libzcc.so' | head -n 1)")

mkdir -p "$work/consumer"
cat >"$work/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.22)
project(consumer C)
find_package(zcc REQUIRED)
add_executable(hello $src/examples/example_hello.c)
target_link_libraries(hello PRIVATE zcc::zcc)
CMAKE
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer/build" >/dev/null
ZCC_DEVICE=host LD_LIBRARY_PATH="$libdir" "$work/consumer/build/hello"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc "$src/examples/example_hello.c" $(pkg-config --cflags --libs zcc) -o "$work/hello_pc"
ZCC_DEVICE=host LD_LIBRARY_PATH="$libdir" "$work/hello_pc"

# Only the API is exported.
if nm -D --defined-only "$libdir/libzcc.so" | awk '{print $3}' | grep -v '^ZCC_0$' | grep -qv '^zcc[A-Z]'; then
  echo "check_install: libzcc.so exports internal symbols:" >&2
  nm -D --defined-only "$libdir/libzcc.so" | awk '{print $3}' | grep -v '^zcc[A-Z]' >&2
  exit 1
fi
# zcc's libnccl.so.2, when built, sits in its own folder only (lib/nccl/).
if [ -e "$build/src/nccl/libnccl.so.2" ]; then
  if [ ! -e "$libdir/nccl/libnccl.so.2" ]; then
    echo "check_install: libnccl.so.2 was built but is not installed in $libdir/nccl" >&2
    exit 1
  fi
  if ls "$libdir"/libnccl.so* >/dev/null 2>&1; then
    echo "check_install: libnccl.so* installed beside libzcc.so, where any program would load it" >&2
    exit 1
  fi
fi
echo "check_install: find_package, pkg-config, the export list and lib/nccl/ are right"
