#!/usr/bin/env bash
# Builds the router image the tests run: Apache Qpid Dispatch Router 1.19.0 on qpid-proton
# 0.37.0 (C core with Cyrus SASL), laid out as the published quay.io/interconnectedcloud/
# qdrouterd:1.19.0 is (qdr-image's Dockerfile): the image's scripts in /home/qdrouterd/bin,
# QDROUTERD_HOME=/home/qdrouterd, CMD ["/home/qdrouterd/bin/launch.sh"], /bin/sh is bash (as
# Fedora's), python3 with the router's modules and Proton's binding (Debian's
# python3-qpid-proton, for qdstat and qdmanage), hostname, saslpasswd2 and the SASL plugins.
#
# The base is a Debian root file system of this machine's release made with debootstrap from
# the mirror this machine's apt uses; Proton and the router are compiled here against the
# same release's libraries and installed into it (Proton's libraries in /usr/local/lib, found
# by the router's RUNPATH before Debian's Proton core, which has the same soname and no SASL).
# The result is an OCI image layout archive (one uncompressed layer, for this machine's
# architecture: amd64 or arm64) that `ctr images import` takes, named qdr-operator.test/qdrouterd:1.19.0.
#
# Sources: $QDR_ROUTER_SOURCES, a folder holding qpid-dispatch-1.19.0.tar.gz,
# qpid-proton-0.37.0.tar.gz and qdr-image/ (Dockerfile, scripts/). Unset, they are fetched
# by tools/router-image/fetch-sources.sh (git tags, commit ids checked) into the cache.
#
# Cached under ${QDR_ROUTER_IMAGE_CACHE:-~/.cache/qdr-operator/router-image}/<key>, the key
# being a hash of this script, the sources (tarball hashes, qdr-image files) and the
# versions of the Debian packages the image and the build use. Needs root (debootstrap,
# chroot), cmake, gcc, g++, make, patchelf, debootstrap and the -dev packages listed below.
#
#   tools/router-image/build.sh           build if needed; print the archive's path last
#   tools/router-image/build.sh --print   print the archive's path without building
#   tools/router-image/build.sh --sources print the sources folder (fetching them if needed)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fail() { echo "router-image: $*" >&2; exit 1; }

DISPATCH=qpid-dispatch-1.19.0
PROTON=qpid-proton-0.37.0
REFERENCE=qdr-operator.test/qdrouterd:1.19.0
# What the image holds from Debian (the published image's dnf list, in Debian's names).
RUNTIME_PKGS=(python3 python3-qpid-proton libsasl2-2 libsasl2-modules libsasl2-modules-db sasl2-bin
  libssl3 libwebsockets17 libuuid1 gettext-base hostname iputils-ping procps)
# What the compile needs on this machine.
BUILD_PKGS=(cmake make gcc g++ pkg-config python3-dev libsasl2-dev libssl-dev libwebsockets-dev
  uuid-dev debootstrap patchelf)

cache_root="${QDR_ROUTER_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdr-operator/router-image}"

sources="${QDR_ROUTER_SOURCES:-}"
if [[ -z "$sources" ]]; then
  sources="$("$here/fetch-sources.sh" "$cache_root/sources")"
fi
[[ -d "$sources" ]] || fail "QDR_ROUTER_SOURCES=$sources is not a folder (it must hold $DISPATCH.tar.gz, $PROTON.tar.gz and qdr-image/)"
for f in "$DISPATCH.tar.gz" "$PROTON.tar.gz" qdr-image/Dockerfile qdr-image/scripts/launch.sh \
  qdr-image/scripts/configure.sh qdr-image/scripts/expandvars.py qdr-image/scripts/auto_mesh.py \
  qdr-image/scripts/create_sasldb.sh; do
  [[ -f "$sources/$f" ]] || fail "missing $sources/$f (QDR_ROUTER_SOURCES must hold $DISPATCH.tar.gz, $PROTON.tar.gz and qdr-image/)"
done

if [[ "${1:-}" == "--sources" ]]; then (cd "$sources" && pwd); exit 0; fi

# Debian: this machine's release and the mirror its apt uses (the image matches the libraries
# the compile links against).
# shellcheck disable=SC1091
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
# The image is for this machine's architecture (Debian's name is the OCI one: amd64, arm64).
arch="$(dpkg --print-architecture)"
multiarch="$(gcc -print-multiarch 2>/dev/null || true)"
[[ -n "$suite" ]] || fail "cannot read VERSION_CODENAME from /etc/os-release (a Debian machine is needed)"
mirror="$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -1 || true)"
[[ -n "$mirror" ]] || mirror="$(grep -hE "^deb [^ ]+ $suite " /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1 || true)"
[[ -n "$mirror" ]] || fail "cannot find the Debian mirror in /etc/apt/sources.list(.d)"

versions() { apt-cache policy "$@" 2>/dev/null | awk '/^[^ ]/{p=$1} /Candidate:/{print p, $2}'; }
key="$( { cat "$0"; sha256sum "$sources/$DISPATCH.tar.gz" "$sources/$PROTON.tar.gz" | cut -d' ' -f1;
  (cd "$sources/qdr-image" && find . -type f | LC_ALL=C sort | xargs sha256sum);
  echo "$suite"; versions "${RUNTIME_PKGS[@]}" "${BUILD_PKGS[@]}"; } | sha256sum | cut -c1-12)"
out="$cache_root/1.19.0-$suite-$key"
archive="$out/qdrouterd.oci.tar"

if [[ "${1:-}" == "--print" ]]; then echo "$archive"; exit 0; fi
if [[ -s "$archive" && -s "$out/packages.txt" ]]; then
  echo "router-image: cached ($out)" >&2
  echo "$archive"; exit 0
fi

[[ $(id -u) == 0 ]] || fail "building the image needs root (debootstrap, chroot)"
missing=()
for p in "${BUILD_PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
(( ${#missing[@]} == 0 )) || fail "missing build packages: apt-get install ${missing[*]}"

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"; flock 9
if [[ -s "$archive" && -s "$out/packages.txt" ]]; then echo "$archive"; exit 0; fi

work="$out.tmp"
rm -rf "$work"; mkdir -p "$work"
trap 'umount "$work/root/proc" 2>/dev/null || true' EXIT
start=$(date +%s); step=$start
took() { echo "router-image: $1 took $(( $(date +%s) - step ))s" >&2; step=$(date +%s); }

echo "router-image: building $PROTON (Cyrus SASL, OpenSSL)" >&2
tar -xzf "$sources/$PROTON.tar.gz" -C "$work"
tar -xzf "$sources/$DISPATCH.tar.gz" -C "$work"
stage="$work/stage"
mkdir -p "$work/proton-build" "$work/dispatch-build"
(cd "$work/proton-build" && cmake "../$PROTON" -DCMAKE_INSTALL_PREFIX=/usr/local -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE=/usr/bin/python3 -DSASL_IMPL=cyrus -DSSL_IMPL=openssl -DBUILD_BINDINGS= \
  -DBUILD_EXAMPLES=OFF -DBUILD_TESTING=OFF -DBUILD_TLS=OFF -DENABLE_FUZZ_TESTING=OFF \
  -DENABLE_BENCHMARKS=OFF -DENABLE_WARNING_ERROR=OFF && make -j"$(nproc)" && make install DESTDIR="$stage") \
  > "$work/proton.log" 2>&1 || { tail -30 "$work/proton.log" >&2; fail "building $PROTON failed (log: $work/proton.log)"; }
grep -q "Found CyrusSASL" "$work/proton.log" || fail "$PROTON was configured without Cyrus SASL (install libsasl2-dev)"
took proton
echo "router-image: building $DISPATCH" >&2
(cd "$work/dispatch-build" && cmake "../$DISPATCH" -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE=/usr/bin/python3 -DUNITTEST_MISSING=ON -DBUILD_TESTING=OFF -DCONSOLE_INSTALL=OFF \
  -DUSE_LIBWEBSOCKETS=ON -DProton_DIR="$stage/usr/local/lib/cmake/Proton" \
  && make -j"$(nproc)" && make install DESTDIR="$stage") \
  > "$work/dispatch.log" 2>&1 || { tail -30 "$work/dispatch.log" >&2; fail "building $DISPATCH failed (log: $work/dispatch.log)"; }
# The router finds Proton's core in /usr/local/lib, never the build folder.
patchelf --set-rpath /usr/local/lib "$stage/usr/sbin/qdrouterd"
took dispatch

echo "router-image: debootstrap $suite (minbase, ${#RUNTIME_PKGS[@]} packages)" >&2
root="$work/root"
debootstrap --variant=minbase --include="$(IFS=,; echo "${RUNTIME_PKGS[*]}")" "$suite" "$root" "$mirror" \
  > "$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; fail "debootstrap failed (log: $work/debootstrap.log)"; }
took debootstrap

# The router, its Python, qdstat/qdmanage, Proton's two libraries the router loads, the
# router's default configuration files; then the image's own layout.
cp -a "$stage"/usr/local/lib/libqpid-proton-core.so.* "$stage"/usr/local/lib/libqpid-proton-proactor.so.* "$root/usr/local/lib/"
cp -a "$stage/usr/local/lib/python3"* "$root/usr/local/lib/"
cp -a "$stage/usr/sbin/qdrouterd" "$root/usr/sbin/"
cp -a "$stage/usr/bin/qdstat" "$stage/usr/bin/qdmanage" "$root/usr/bin/"
cp -a "$stage/usr/lib/qpid-dispatch" "$root/usr/lib/"
mkdir -p "$root/etc/qpid-dispatch" "$root/etc/sasl2" "$root/usr/share/doc/qpid-dispatch"
cp "$stage/etc/qpid-dispatch/qdrouterd.conf" "$root/etc/qpid-dispatch/"
cp "$stage/etc/sasl2/qdrouterd.conf" "$root/etc/sasl2/"
mkdir -p "$root/home/qdrouterd/bin" "$root/home/qdrouterd/etc"
install -m 0755 "$sources"/qdr-image/scripts/* "$root/home/qdrouterd/bin/"
ln -sfn bash "$root/usr/bin/sh"
chmod 1777 "$root/tmp"
chroot "$root" ldconfig

# What the image must do, checked inside it before it is written.
mount -t proc proc "$root/proc"
chroot "$root" /usr/sbin/qdrouterd --version > "$work/version.txt" || fail "qdrouterd does not run in the image"
grep -qx "1.19.0" "$work/version.txt" || fail "qdrouterd --version says $(cat "$work/version.txt"), not 1.19.0"
printf 'router {\n  mode: standalone\n  id: check\n}\n' > "$root/tmp/check.conf"
pid_maps="$(chroot "$root" bash -c 'qdrouterd -c /tmp/check.conf >/tmp/check.log 2>&1 & p=$!; sleep 2; cat /proc/$p/maps; kill $p; wait $p; true')"
core="$(grep -o '/[^ ]*libqpid-proton-core[^ ]*' <<<"$pid_maps" | sort -u)"
[[ "$core" == /usr/local/lib/libqpid-proton-core.so.* ]] || fail "the router loads Proton's core from '$core', not /usr/local/lib"
chroot "$root" python3 -c 'import proton, qpid_dispatch.management.client' || fail "python3 lacks proton or qpid_dispatch"
for b in /usr/bin/hostname /usr/sbin/saslpasswd2 /usr/bin/qdstat /usr/bin/qdmanage; do
  [[ -x "$root$b" ]] || fail "$b is missing from the image"
done
ls "$root/usr/lib/$multiarch"/sasl2/libplain.so* >/dev/null 2>&1 || fail "the SASL PLAIN plugin is missing"
ls "$root/usr/lib/$multiarch"/sasl2/libsasldb.so* >/dev/null 2>&1 || fail "the SASL sasldb plugin is missing"
umount "$root/proc"
chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' | LC_ALL=C sort > "$work/packages.txt"

# Trim what a container never reads: package caches and lists, documentation, translations.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/log/* \
  "$root"/dev/* "$root"/proc/* "$root"/sys/* "$root"/run/* "$root"/tmp/* "$root"/debootstrap
took assembly

# The OCI image layout: one reproducible uncompressed layer (sorted, mtime 0, numeric owners).
oci="$work/oci"
mkdir -p "$oci/blobs/sha256"
tar --sort=name --mtime=@0 --numeric-owner --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  --xattrs --xattrs-include='security.capability' -C "$root" -cf "$work/layer.tar" .
blob() { local d; d=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "$oci/blobs/sha256/$d"; echo "$d"; }
layer_size=$(stat -c %s "$work/layer.tar")
layer=$(blob "$work/layer.tar")
printf '%s' "{\"architecture\":\"$arch\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\",\"VERSION=1.19.0\",\"QDROUTERD_HOME=/home/qdrouterd\"],\"Cmd\":[\"/home/qdrouterd/bin/launch.sh\"],\"WorkingDir\":\"/home/qdrouterd/bin\",\"ExposedPorts\":{\"5671/tcp\":{},\"5672/tcp\":{},\"55672/tcp\":{}}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer\"]},\"history\":[{\"created_by\":\"tools/router-image/build.sh: debootstrap $suite, $PROTON, $DISPATCH, qdr-image scripts\"}]}" > "$work/config.json"
config_size=$(stat -c %s "$work/config.json")
config=$(blob "$work/config.json")
printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$layer\",\"size\":$layer_size}]}" > "$work/manifest.json"
manifest_size=$(stat -c %s "$work/manifest.json")
manifest=$(blob "$work/manifest.json")
printf '%s' '{"imageLayoutVersion":"1.0.0"}' > "$oci/oci-layout"
printf '%s' "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest\",\"size\":$manifest_size,\"annotations\":{\"io.containerd.image.name\":\"$REFERENCE\",\"org.opencontainers.image.ref.name\":\"1.19.0\"}}]}" > "$oci/index.json"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$oci" -cf "$work/qdrouterd.oci.tar" oci-layout index.json blobs
took "the OCI archive ($(( layer_size / 1048576 )) MiB layer)"

mkdir -p "$out.new"
mv "$work/qdrouterd.oci.tar" "$work/packages.txt" "$work/version.txt" "$out.new/"
echo "$REFERENCE" > "$out.new/reference.txt"
echo "$(( $(date +%s) - start ))" > "$out.new/build-seconds.txt"
rm -rf "$out" && mv "$out.new" "$out"
rm -rf "$work"
echo "router-image: built $REFERENCE in $(( $(date +%s) - start ))s ($(du -m "$archive" | cut -f1) MiB)" >&2
echo "$archive"
