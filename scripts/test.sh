#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy with warnings as errors, and all tests.
# Works on a fresh machine: installs what it needs first (rustfmt, clippy, cargo-nextest, the musl
# target and musl-tools, and the Python packages of the chart tests).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

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

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "Rust tests"
cargo nextest run --workspace --locked --no-fail-fast --show-progress=none

step "Helm chart and image tests"
python3 -m pytest tests/charts tests/packaging -q -p no:cacheprovider
