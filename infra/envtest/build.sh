#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and etcd for the integration tests from the Go module proxy (see go.mod), into
# .cache/envtest/<version>/ at the repository's root, only when they are missing. Prints the directory.
# Needs Go >= 1.26 (GO or PATH or /usr/local/go/bin); without it, says so and exits 0 (the tests then skip).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
out="${ENVTEST_DIR:-$root/.cache/envtest/$version}"
if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -x "$out/kube-controller-manager" ]]; then
  echo "$out"
  exit 0
fi
# A Go toolchain >= 1.26: $GO, `go` on PATH or /usr/local/go; an older `go` fetches the toolchain
# module from the Go module proxy itself (GOTOOLCHAIN).
toolchain=go1.26.8
new_enough() { [[ -n "$1" ]] && "$1" version 2>/dev/null | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; }
go="${GO:-$(command -v go || true)}"
new_enough "$go" || { [[ -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go; }
if [[ -n "$go" ]] && ! new_enough "$go" && GOTOOLCHAIN="$toolchain" "$go" version >/dev/null 2>&1; then
  export GOTOOLCHAIN="$toolchain"
  new_enough() { [[ -n "$1" ]] && GOTOOLCHAIN="$toolchain" "$1" version 2>/dev/null | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; }
fi
if ! new_enough "$go"; then
  echo "envtest: no Go >= 1.26 (and none could be fetched); the Kubernetes tests will skip" >&2
  exit 0
fi
mkdir -p "$out"
cd "$here"
start=$(date +%s)
# -p 2: the machines that run this have two cores; -trimpath and no DWARF keep the binaries small.
"$go" build -p 2 -trimpath -ldflags='-s -w' -o "$out/etcd.tmp" ./cmd/etcd
"$go" build -p 2 -trimpath -ldflags='-s -w' -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
# The Job controller of one test (tests/k8s/test_kubernetes_job_controller.py): the others play it.
"$go" build -p 2 -trimpath -ldflags='-s -w' -o "$out/kube-controller-manager.tmp" k8s.io/kubernetes/cmd/kube-controller-manager
mv "$out/etcd.tmp" "$out/etcd"
mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
mv "$out/kube-controller-manager.tmp" "$out/kube-controller-manager"
echo "envtest: built kube-apiserver $version, kube-controller-manager and etcd in $(( $(date +%s) - start ))s" >&2
echo "$out"
