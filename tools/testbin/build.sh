#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kube-controller-manager, kubectl)
# from the Go module proxy into a cache directory outside the repo, keyed by the pinned
# versions and the Go version. Reuses the cache when all four binaries are present.
# Prints the directory on its last line of stdout.
#
#   tools/testbin/build.sh            build if needed, print the directory
#   tools/testbin/build.sh --print    print the directory without building
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The pins live in the go.mod files; read them back (tidy may put them in a require block).
modver() { grep -E "^(require)?[[:space:]]*$2 v" "$1" | head -1 | sed -E "s|.*$2 (v[^ ]+).*|\1|"; }
K8S_VERSION="$(modver "$here/k8s/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" ]] || { echo "build.sh: cannot read pinned versions from go.mod" >&2; exit 1; }
command -v go >/dev/null || { echo "build.sh: Go is required to build the test control plane (install Go >= 1.24)" >&2; exit 1; }
GO_VERSION="$(go env GOVERSION)"
cache_root="${QDR_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdr-operator/testbin}"
out="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-$GO_VERSION"
bins=(etcd kube-apiserver kube-controller-manager kubectl)

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi

complete=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || complete=0; done
if [[ $complete == 1 ]]; then
  echo "testbin: cached (k8s $K8S_VERSION, etcd $ETCD_VERSION, $GO_VERSION)" >&2
  echo "$out"; exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$out.tmp"
start=$(date +%s)

minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

echo "testbin: building etcd $ETCD_VERSION" >&2
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
for b in kube-apiserver kube-controller-manager kubectl; do
  echo "testbin: building $b $K8S_VERSION (a cold build takes many minutes)" >&2
  (cd "$here/k8s" && go build -trimpath -tags selinux,notest -ldflags "$ld" -o "$out.tmp/$b" "k8s.io/kubernetes/cmd/$b")
done

"$out.tmp/kube-apiserver" --version >&2
"$out.tmp/etcd" --version | head -1 >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "testbin: built in $(( $(date +%s) - start ))s" >&2
echo "$out"
