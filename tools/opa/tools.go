//go:build tools

// Package tools records that scripts/opa-tool builds opa from this module, so
// that go.mod and go.sum pin it.
package tools

import _ "github.com/open-policy-agent/opa"
