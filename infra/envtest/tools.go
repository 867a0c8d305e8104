//go:build tools

// Keeps the main packages of kube-apiserver and kube-controller-manager in the module graph so that
// `go build k8s.io/kubernetes/cmd/...` resolves them.
package envtest

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
