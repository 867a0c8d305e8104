#!/usr/bin/env bash
# Builds kube-apiserver and etcd for the integration tests from the Go module proxy (see go.mod), into
# .cache/envtest/<version>/ at the repository's root, only when they are missing. Prints the directory.
# Needs Go >= 1.26 (GO or PATH or /usr/local/go/bin); without it, says so and exits 0 (the tests then skip).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod")"
out="${ENVTEST_DIR:-$root/.cache/envtest/$version}"
if [[ -x "$out/kube-apiserver" && -x "$out/etcd" ]]; then
  echo "$out"
  exit 0
fi
go="${GO:-$(command -v go || true)}"
[[ -z "$go" && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
if [[ -z "$go" ]]; then
  echo "envtest: no Go toolchain; the Kubernetes integration tests will skip" >&2
  exit 0
fi
mkdir -p "$out"
cd "$here"
start=$(date +%s)
# -p 2: the machines that run this have two cores; -trimpath and no DWARF keep the binaries small.
"$go" build -p 2 -trimpath -ldflags='-s -w' -o "$out/etcd.tmp" ./cmd/etcd
"$go" build -p 2 -trimpath -ldflags='-s -w' -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$out/etcd.tmp" "$out/etcd"
mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
echo "envtest: built kube-apiserver $version and etcd in $(( $(date +%s) - start ))s" >&2
echo "$out"
