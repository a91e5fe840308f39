#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), kwok (simulated nodes: it plays the kubelet), the real node's
# kubelet and kube-proxy (same pinned k8s.io/kubernetes), `pause` (the real node's sandbox
# program, tools/testbin/pause), helm (the chart tests), CoreDNS (the real node's cluster
# DNS, tools/testbin/coredns) and the Prometheus Operator with its CRDs (the monitoring
# tests, tools/testbin/monitoring: prometheus-operator, monitoring-crds/) and Prometheus with
# promtool (tools/testbin/prometheus), Operator Lifecycle Manager with opm and the bundle
# validators (tools/testbin/olm), actionlint (tools/testbin/actionlint, in the helm group), crane
# (tools/testbin/crane, in the node group: a registry and a pusher), netpol (tools/testbin/netpol,
# in the node group: the real node's NetworkPolicy implementation) and,
# for `make release` only, syft (tools/testbin/syft, the release group) from the Go module proxy into a
# cache directory outside the repo, keyed by the pinned versions, the Go version and a hash of
# the go.mod files and the pause source (so adding a tool rebuilds), and assembles kwok's own stage definitions (node-initialize, node heartbeat with a
# Lease, pod-ready, pod-complete, pod-delete, from its module) into kwok-stages.yaml. Reuses
# the cache when every file is present. Prints the directory on its last line of stdout.
#
#   tools/testbin/build.sh [GROUP...]  build the groups (all but release when none is named) if needed,
#                                      print the directory
#   tools/testbin/build.sh --print     print the directory without building
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The pins live in the go.mod files; read them back (tidy may put them in a require block).
modver() { grep -E "^(require)?[[:space:]]*$2 v" "$1" | head -1 | sed -E "s|.*$2 (v[^ ]+).*|\1|"; }
K8S_VERSION="$(modver "$here/k8s/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(modver "$here/kwok/go.mod" sigs.k8s.io/kwok)"
HELM_VERSION="$(modver "$here/helm/go.mod" helm.sh/helm/v3)"
COREDNS_VERSION="$(modver "$here/coredns/go.mod" github.com/coredns/coredns)"
PROMOP_VERSION="$(modver "$here/monitoring/go.mod" github.com/prometheus-operator/prometheus-operator)"
PROM_VERSION="$(modver "$here/prometheus/go.mod" github.com/prometheus/prometheus)"
OLM_VERSION="$(modver "$here/olm/go.mod" github.com/operator-framework/operator-lifecycle-manager)"
ACTIONLINT_VERSION="$(modver "$here/actionlint/go.mod" github.com/rhysd/actionlint)"
SYFT_VERSION="$(modver "$here/syft/go.mod" github.com/anchore/syft)"
CRANE_VERSION="$(modver "$here/crane/go.mod" github.com/google/go-containerregistry)"
NETPOL_VERSION="$(modver "$here/netpol/go.mod" sigs.k8s.io/kube-network-policies)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" && -n "$KWOK_VERSION" && -n "$HELM_VERSION" && -n "$COREDNS_VERSION" && -n "$PROMOP_VERSION" && -n "$PROM_VERSION" && -n "$OLM_VERSION" && -n "$ACTIONLINT_VERSION" && -n "$SYFT_VERSION" && -n "$CRANE_VERSION" && -n "$NETPOL_VERSION" ]] || { echo "build.sh: cannot read pinned versions from go.mod" >&2; exit 1; }
command -v go >/dev/null || { echo "build.sh: Go is required to build the test control plane (install Go >= 1.26)" >&2; exit 1; }
GO_VERSION="$(go env GOVERSION)"
cache_root="${QDR_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qdr-operator/testbin}"
# The helm pin is left out of the key: helm is checked on its own (build_helm).
key="$(cat "$here/k8s/go.mod" "$here/etcd/go.mod" "$here/kwok/go.mod" "$here/pause/go.mod" "$here/pause/main.go" \
  | sha256sum | cut -c1-8)"
out="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$GO_VERSION-$key"

if [[ "${1:-}" == "--print" ]]; then echo "$out"; exit 0; fi

# One build at a time per cache: a second caller waits, then finds the cache complete (two
# builds sharing "$out.tmp" made each other fail).
mkdir -p "$cache_root"
if command -v flock >/dev/null; then exec 9>"$cache_root/.lock"; flock 9; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
# One Go program built into the same directory but checked on its own (<name>.version), so
# its pin does not rebuild the control plane:
#   build_tool NAME VERSION MODULE_DIR PACKAGE [LDFLAGS]
build_tool() {
  local name="$1" version="$2" dir="$3" pkg="$4" ldflags="${5:-}"
  if [[ -x "$out/$name" && "$(cat "$out/$name.version" 2>/dev/null)" == "$version" ]]; then return 0; fi
  local t; t=$(date +%s)
  echo "testbin: building $name $version" >&2
  (cd "$here/$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name" && echo "$version" > "$out/$name.version"
  echo "testbin: $name took $(( $(date +%s) - t ))s" >&2
}
# helm (the chart tests).
build_helm() {
  build_tool helm "$HELM_VERSION" helm helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}
# actionlint, which checks the GitHub Actions workflows (.github/workflows/), built beside helm.
build_actionlint() {
  build_tool actionlint "$ACTIONLINT_VERSION" actionlint github.com/rhysd/actionlint/cmd/actionlint
}
# crane, the registry the real node pulls a release's images from, and what pushes them there
# (docs/releasing.md), built with the real node.
build_crane() {
  build_tool crane "$CRANE_VERSION" crane github.com/google/go-containerregistry/cmd/crane
}
# netpol, the real node's NetworkPolicy implementation (sigs.k8s.io/kube-network-policies started
# from a kubeconfig, tools/testbin/netpol/main.go), built with the real node. Its version file
# also holds a hash of main.go, so an edit rebuilds it.
build_netpol() {
  build_tool netpol "$NETPOL_VERSION-$(sha256sum "$here/netpol/main.go" | cut -c1-8)" netpol .
}
# syft, which writes the release's SBOMs (`make release`; the release group, which no other
# group and no test needs).
build_syft() {
  build_tool syft "$SYFT_VERSION" syft github.com/anchore/syft/cmd/syft "-X main.version=$SYFT_VERSION"
}

# CoreDNS, the real node's cluster DNS, with the plugins tools/testbin/coredns/main.go names;
# rebuilt when that file or the pinned version changes.
build_coredns() {
  local stamp; stamp="$COREDNS_VERSION $(cat "$here/coredns/main.go" "$here/coredns/go.sum" | sha256sum | cut -c1-8)"
  if [[ -x "$out/coredns" && "$(cat "$out/coredns.version" 2>/dev/null)" == "$stamp" ]]; then return 0; fi
  local t; t=$(date +%s)
  echo "testbin: building coredns $COREDNS_VERSION" >&2
  (cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$out/coredns.tmp" .)
  mv "$out/coredns.tmp" "$out/coredns" && echo "$stamp" > "$out/coredns.version"
  echo "testbin: coredns took $(( $(date +%s) - t ))s" >&2
}

# The Prometheus Operator (its operator binary) and its CRDs, from the pinned module; rebuilt
# when the pin or go.sum changes.
build_monitoring() {
  local stamp; stamp="$PROMOP_VERSION $(sha256sum < "$here/monitoring/go.sum" | cut -c1-8)"
  if [[ -x "$out/prometheus-operator" && -d "$out/monitoring-crds" \
        && "$(cat "$out/prometheus-operator.version" 2>/dev/null)" == "$stamp" ]]; then return 0; fi
  local t; t=$(date +%s)
  echo "testbin: building prometheus-operator $PROMOP_VERSION" >&2
  (cd "$here/monitoring" && go build -trimpath -ldflags "-s -w" -o "$out/prometheus-operator.tmp" \
    github.com/prometheus-operator/prometheus-operator/cmd/operator)
  local dir; dir="$(cd "$here/monitoring" && go list -m -f '{{.Dir}}' github.com/prometheus-operator/prometheus-operator)"
  rm -rf "$out/monitoring-crds" && mkdir -p "$out/monitoring-crds"
  cp "$dir"/example/prometheus-operator-crd/*.yaml "$out/monitoring-crds/"
  chmod u+w "$out"/monitoring-crds/*.yaml
  mv "$out/prometheus-operator.tmp" "$out/prometheus-operator" && echo "$stamp" > "$out/prometheus-operator.version"
  echo "testbin: prometheus-operator took $(( $(date +%s) - t ))s" >&2
}

# Operator Lifecycle Manager for the bundle tests (tools/testbin/olm): its olm and catalog
# operators, cpb (the bundle unpacker's copy tool), opm (serves the test catalog, extracts
# bundles), our validator driver over operator-framework/api, and OLM's CRDs (olm-crds/).
build_olm() {
  local stamp; stamp="$OLM_VERSION $(cat "$here/olm/go.sum" "$here/olm/validate/main.go" | sha256sum | cut -c1-8)"
  if [[ -x "$out/olm" && -x "$out/opm" && -d "$out/olm-crds" \
        && "$(cat "$out/olm.version" 2>/dev/null)" == "$stamp" ]]; then return 0; fi
  local t; t=$(date +%s)
  echo "testbin: building OLM $OLM_VERSION (olm, catalog, cpb, opm, validate)" >&2
  local olm=github.com/operator-framework/operator-lifecycle-manager
  for p in "$olm/cmd/olm" "$olm/cmd/catalog" "$olm/util/cpb" github.com/operator-framework/operator-registry/cmd/opm ./validate; do
    local b; b="$(basename "$p")"; [[ "$b" == validate ]] && b=olm-validate
    (cd "$here/olm" && go build -trimpath -ldflags "-s -w" -o "$out/$b.tmp" "$p")
    mv "$out/$b.tmp" "$out/$b"
  done
  local dir; dir="$(cd "$here/olm" && go list -m -f '{{.Dir}}' "$olm")"
  rm -rf "$out/olm-crds" && mkdir -p "$out/olm-crds"
  cp "$dir"/deploy/chart/crds/*.yaml "$out/olm-crds/" && chmod u+w "$out"/olm-crds/*.yaml
  echo "$stamp" > "$out/olm.version"
  echo "testbin: OLM took $(( $(date +%s) - t ))s" >&2
}

# Prometheus and promtool with only Kubernetes service discovery (Debian's prometheus has
# none); module v0.3MM.P is Prometheus 3.MM.P, which `--version` reports.
build_prometheus() {
  local stamp; stamp="$PROM_VERSION $(sha256sum < "$here/prometheus/go.sum" | cut -c1-8)"
  if [[ -x "$out/prometheus" && -x "$out/promtool" \
        && "$(cat "$out/prometheus.version" 2>/dev/null)" == "$stamp" ]]; then return 0; fi
  local t; t=$(date +%s)
  local minor patch; minor="$(echo "$PROM_VERSION" | cut -d. -f2)"; patch="$(echo "$PROM_VERSION" | cut -d. -f3)"
  local release="3.$(( minor - 300 )).$patch"
  echo "testbin: building prometheus $release ($PROM_VERSION)" >&2
  local ld="-s -w -X github.com/prometheus/common/version.Version=$release"
  for b in prometheus promtool; do
    (cd "$here/prometheus" && go build -trimpath -tags remove_all_sd,enable_kubernetes_sd -ldflags "$ld" \
      -o "$out/$b.tmp" "github.com/prometheus/prometheus/cmd/$b")
    mv "$out/$b.tmp" "$out/$b"
  done
  echo "$stamp" > "$out/prometheus.version"
  echo "testbin: prometheus took $(( $(date +%s) - t ))s" >&2
}

# The groups, each built (and checked) on its own, so a target builds only what it runs
# (`make run`: core; `make run-real`: core and node; `make test`: all, the groups as the
# tests that need them come up):
#   core        etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok
#               and kwok-stages.yaml (every control plane)
#   node        kubelet, kube-proxy, pause, coredns (the real node), crane (its registry),
#               netpol (its NetworkPolicy implementation)
#   helm        helm (the chart tests)
#   monitoring  prometheus-operator with monitoring-crds/, prometheus, promtool
#   olm         olm, catalog, cpb, opm, olm-validate with olm-crds/
# Each binary is written beside its final name and moved into place, so a build that is
# stopped leaves no half binary and the next one resumes where it stopped.
groups=("${@}")
(( ${#groups[@]} )) || groups=(core node helm monitoring olm)
mkdir -p "$out"
start=$(date +%s)

minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
k8s_ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ld="$k8s_ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

# build_k8s NAME...: the named k8s.io/kubernetes commands that are not built yet, in one `go
# build` (the packages they share are compiled once, the links run side by side).
build_k8s() {
  local todo=() b t
  for b in "$@"; do [[ -x "$out/$b" ]] || todo+=("$b"); done
  (( ${#todo[@]} )) || return 0
  t=$(date +%s)
  echo "testbin: building ${todo[*]} $K8S_VERSION (a cold build takes many minutes)" >&2
  rm -rf "$out/k8s.tmp" && mkdir -p "$out/k8s.tmp"
  (cd "$here/k8s" && go build -trimpath -tags selinux,notest -ldflags "$k8s_ld" -o "$out/k8s.tmp/" \
    "${todo[@]/#/k8s.io/kubernetes/cmd/}")
  for b in "${todo[@]}"; do mv "$out/k8s.tmp/$b" "$out/$b"; done
  rm -rf "$out/k8s.tmp"
  echo "testbin: ${todo[*]} took $(( $(date +%s) - t ))s" >&2
}

build_core() {
  if [[ ! -x "$out/etcd" ]]; then
    local t; t=$(date +%s)
    echo "testbin: building etcd $ETCD_VERSION" >&2
    (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3)
    mv "$out/etcd.tmp" "$out/etcd"
    echo "testbin: etcd took $(( $(date +%s) - t ))s" >&2
  fi
  build_k8s kube-apiserver kube-controller-manager kube-scheduler kubectl
  if [[ ! -x "$out/kwok" || ! -s "$out/kwok-stages.yaml" ]]; then
    local t; t=$(date +%s)
    echo "testbin: building kwok $KWOK_VERSION" >&2
    (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$out/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok)
    # kwok runs only what its stages say; these are the ones `kwokctl` installs by default.
    local kwok_dir f; kwok_dir="$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
    for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
             pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
      echo "---"; cat "$kwok_dir/kustomize/stage/$f.yaml"
    done > "$out/kwok-stages.yaml.tmp"
    mv "$out/kwok-stages.yaml.tmp" "$out/kwok-stages.yaml" && mv "$out/kwok.tmp" "$out/kwok"
    "$out/kube-apiserver" --version >&2
    # sed reads all of it: `head -1` would close the pipe early, etcd would die of SIGPIPE,
    # and pipefail would end this script.
    "$out/etcd" --version | sed -n 1p >&2
    "$out/kwok" --version >&2
    echo "testbin: kwok took $(( $(date +%s) - t ))s" >&2
  fi
}

build_node() {
  build_k8s kubelet kube-proxy
  if [[ ! -x "$out/pause" ]]; then
    (cd "$here/pause" && go build -trimpath -ldflags "-s -w" -o "$out/pause.tmp" .)
    mv "$out/pause.tmp" "$out/pause"
  fi
  build_coredns
}

for g in "${groups[@]}"; do
  case "$g" in
    core) build_core ;;
    node) build_node; build_crane; build_netpol ;;
    helm) build_helm; build_actionlint ;;
    monitoring) build_monitoring; build_prometheus ;;
    olm) build_olm ;;
    release) build_syft ;;
    *) echo "build.sh: unknown group $g (core, node, helm, monitoring, olm, release)" >&2; exit 2 ;;
  esac
done
echo "testbin: ${groups[*]} ready in $(( $(date +%s) - start ))s (k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, $GO_VERSION)" >&2
echo "$out"
