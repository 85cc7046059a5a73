#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy with warnings as errors, and all tests, then the
# suites on a real Kubernetes control plane (scripts/control-plane; tests/control_plane).
# Works on a fresh machine: installs what it needs first (rustfmt, clippy, cargo-nextest, the release
# build's zig, cargo-zigbuild and musl targets, and the Python packages of the chart tests); the
# control plane needs Go.
#
#   scripts/test.sh [--skip-control-plane]
#
# --skip-control-plane (or KAOS_SKIP_CONTROL_PLANE=1) leaves out the real-plane suites, for quick
# local runs (they need Go, and a first run builds Kubernetes from source: 10-20 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

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

# The release build (scripts/release-build.sh: static musl binaries for amd64 and arm64, the
# images' contents) links with zig, from PyPI, through cargo-zigbuild; both pinned there.
step "release build tools (zig, cargo-zigbuild, the musl targets of amd64 and arm64)"
scripts/release-tools.sh

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

# The release's arm64 binaries, cross-compiled by the release build as the release workflow does
# (only the three controllers; cold: see docs/testing.md), checked to be static aarch64 executables
# that the Dockerfiles' COPY finds for linux/arm64.
step "arm64 cross build (scripts/release-build.sh --arch arm64; tests/packaging -k arm64)"
KAOS_CROSS_BUILD=1 python3 -m pytest tests/packaging -q -p no:cacheprovider -k arm64

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
