#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy with warnings as errors, and all tests, then the
# suites on a real Kubernetes control plane (scripts/control-plane; tests/control_plane).
# Works on a fresh machine: installs what it needs first (rustfmt, clippy, cargo-nextest, the musl
# target and musl-tools, and the Python packages of the chart tests); the control plane needs Go.
#
#   scripts/test.sh [--skip-control-plane]
#
# --skip-control-plane (or KAOS_SKIP_CONTROL_PLANE=1) leaves out the real-plane suites, for quick
# local runs (they need Go, and a first run builds Kubernetes from source: 10-20 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step shows the time since the start, so a CI log says where the time went.
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

skip_control_plane="${KAOS_SKIP_CONTROL_PLANE:-0}"
for arg in "$@"; do
  case "$arg" in
    --skip-control-plane) skip_control_plane=1 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument '$arg' (usage: scripts/test.sh [--skip-control-plane])" >&2; exit 2 ;;
  esac
done

# Checked first, so a machine without Go fails now rather than after the Rust tests.
if [ "$skip_control_plane" != 1 ]; then
  step "Go for the real control plane"
  if ! go version; then
    echo "scripts/test.sh: Go is not installed. The real-control-plane suites build Kubernetes" \
      "(kube-apiserver, etcd, kwok, helm) from the Go module proxy and need Go >= 1.26:" \
      "install it (https://go.dev/dl/), or pass --skip-control-plane to leave them out." >&2
    exit 1
  fi
  # Fetch the Go modules of the plane and of promtool (network-bound, ~2 GB on a cold machine) while Rust compiles (CPU-bound);
  # the build step below waits for it. A failed fetch is retried by that build.
  mkdir -p .cache/control-plane/logs
  for module in tools/control-plane/*/ tools/promtool/; do
    (cd "$module" && GOWORK=off go mod download) >".cache/control-plane/logs/download-$(basename "$module").log" 2>&1 &
  done
fi

step "toolchain components"
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

step "static build tools (musl) for the image build step"
if ! command -v musl-gcc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq musl-tools >/dev/null;
  else sudo apt-get update -qq && sudo apt-get install -y -qq musl-tools >/dev/null; fi
fi
rustup target add x86_64-unknown-linux-musl >/dev/null

step "Python packages for the chart and image tests (Helm v4 SDK, kubernetes-validate, pytest)"
python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt

# Incremental artifacts only pay off on rebuilds and take gigabytes: off unless asked for.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

# The dependencies' licenses, sources and duplicates against deny.toml. Not `advisories`: its
# database is cloned from GitHub, which CI cannot reach (docs/testing.md).
step "cargo deny (licenses, bans, sources)"
cargo_deny_version=0.20.2
if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $cargo_deny_version" ]; then
  cargo install cargo-deny --version "$cargo_deny_version" --locked
fi
cargo deny --all-features --locked check --hide-inclusion-graph licenses bans sources

# One build of the whole workspace serves the tests, the binaries the end-to-end tests run
# (tests/processes.rs builds the same set, so it finds them fresh) and the real-plane suites. A
# `cargo build -p ...` would unify features differently and compile the dependencies again.
step "cargo build (workspace, all targets)"
cargo build --workspace --all-targets --locked

step "Rust tests"
cargo nextest run --workspace --locked --no-fail-fast --show-progress=none

step "Helm chart and image tests"
python3 -m pytest tests/charts tests/packaging -q -p no:cacheprovider

# promtool checks and unit-tests the chart's rendered alerts (tests/alerts). It is built from
# tools/promtool with Go (cold: ~550 CPU-seconds, 5-9 minutes on 2 cores, see docs/testing.md; cached in
# .cache/promtool). Without Go (only possible with --skip-control-plane) the step is skipped.
if command -v go >/dev/null 2>&1; then
  step "Alert rules: promtool check rules and promtool test rules (tests/alerts)"
  KAOS_PROMTOOL="$(scripts/promtool path)" python3 -m pytest tests/alerts -q -p no:cacheprovider
else
  step "Alert rules: skipped (no Go to build promtool)"
fi

if [ "$skip_control_plane" = 1 ]; then
  step "Real control plane suites: skipped (--skip-control-plane)"
else
  step "Real control plane: build (cached in .cache/control-plane; cold: 10-20 minutes)"
  wait # the module downloads started above
  scripts/control-plane build

  step "Real control plane suites (kube-apiserver v1.37.2, helm, the controllers out of cluster)"
  KAOS_CONTROL_PLANE=1 python3 -m pytest tests/control_plane -q -p no:cacheprovider
fi

step "All checks passed"
