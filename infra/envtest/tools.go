//go:build tools

// Keeps kube-apiserver's main package in the module graph so `go build k8s.io/kubernetes/cmd/kube-apiserver` resolves.
package envtest

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
