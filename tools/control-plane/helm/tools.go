//go:build tools

// Package tools records that scripts/control-plane builds helm from this
// module, so that go.mod and go.sum pin it.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
