//go:build tools

// Package tools records the commands that scripts/control-plane builds from
// this module, so that go.mod and go.sum pin them.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
