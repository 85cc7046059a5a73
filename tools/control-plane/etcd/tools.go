//go:build tools

// Package tools records that scripts/control-plane builds etcd (the root
// package of go.etcd.io/etcd/server/v3 is its main package) from this module.
package tools

import _ "go.etcd.io/etcd/server/v3"
