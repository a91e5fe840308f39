#!/usr/bin/env bash
# Lays out the root filesystem of one of the operator's images: the release binary and exactly
# the shared libraries it loads, nothing else. The published images (the Dockerfiles beside
# this file, in their build stage) and the images the tests run (`make images`, and the test
# harness's tests/src/images.rs) are both made by this script, so they hold the same files.
#
#   deploy/docker/rootfs.sh BINARY ROOTFS
#
# BINARY  a dynamically linked (glibc) ELF program, e.g. target/release/qdr-controller
# ROOTFS  a directory to create (must not exist or be empty); afterwards it holds
#           /<basename of BINARY>             mode 0755
#           the dynamic loader, at the absolute path the binary names (its PT_INTERP)
#           every library `ldd` resolves, at the path the loader found it under (symbolic
#           links followed: the file is stored under the name the loader looks for)
# Exits non-zero when ldd cannot resolve a library ("not found").
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BINARY ROOTFS" >&2; exit 2; }
binary="$1" rootfs="$2"
[[ -f "$binary" ]] || { echo "rootfs.sh: no such binary: $binary" >&2; exit 1; }
if [[ -e "$rootfs" && -n "$(ls -A "$rootfs")" ]]; then
  echo "rootfs.sh: $rootfs is not empty" >&2; exit 1
fi
mkdir -p "$rootfs"
install -m 0755 "$binary" "$rootfs/$(basename "$binary")"

# `ldd` prints "name => /path (addr)" for each library and "/path (addr)" for the loader.
libs="$(ldd "$binary")" || { echo "rootfs.sh: ldd $binary failed: $libs" >&2; exit 1; }
if grep -q "not found" <<<"$libs"; then
  echo "rootfs.sh: $binary needs libraries this system does not have:" >&2
  grep "not found" <<<"$libs" >&2; exit 1
fi
awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs" | sort -u |
while read -r path; do
  mkdir -p "$rootfs$(dirname "$path")"
  install -m 0755 "$(readlink -f "$path")" "$rootfs$path"
done
