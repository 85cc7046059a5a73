//go:build tools

// Package tools records that scripts/keda-interceptor-tool builds the interceptor from this
// module, so that go.mod and go.sum pin it.
package tools

import _ "github.com/kedacore/http-add-on/interceptor"
