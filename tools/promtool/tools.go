//go:build tools

// Package tools records that scripts/promtool builds promtool from this
// module, so that go.mod and go.sum pin it.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
