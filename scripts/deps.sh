#!/usr/bin/env bash
# Install the Debian packages listed in .ci/packages.txt that are missing.
# Does nothing (and needs no network) when all of them are present. Run as
# root, or with sudo available, to install; otherwise it names what is
# missing and fails. ZCC_SKIP_DEPS=1 skips the check.
# Usage: scripts/deps.sh [--update]   --update: apt-get update even when
#                                     nothing is missing
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list=$root/.ci/packages.txt

# The package names of the list, without comments and blank lines.
zcc_packages() {
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$list"
}

if [ "${ZCC_SKIP_DEPS:-0}" = 1 ]; then
  echo "deps: skipped (ZCC_SKIP_DEPS=1)"
  exit 0
fi
if ! command -v dpkg-query >/dev/null; then
  echo "deps: not a Debian system; install the equivalents of:" \
    $(zcc_packages) >&2
  exit 0
fi

mapfile -t packages < <(zcc_packages)
missing=()
for pkg in "${packages[@]}"; do
  state=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [ "$state" != "install ok installed" ]; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ] && [ "${1:-}" != --update ]; then
  echo "deps: all ${#packages[@]} packages of .ci/packages.txt are installed"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo)
  else
    echo "deps: missing packages: ${missing[*]}" >&2
    echo "deps: as root, run: apt-get install -y --no-install-recommends" \
      "${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "deps: apt-get update"
"${sudo[@]}" apt-get update
if [ "${#missing[@]}" -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
