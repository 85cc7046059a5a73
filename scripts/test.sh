#!/usr/bin/env bash
# Runs every check CI runs: formatting, clippy with warnings as errors, and all tests.
# Works on a fresh machine: installs what it needs (rustfmt, clippy, cargo-nextest) first.
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

step "Python packages for the chart tests (Helm v4 SDK, kubernetes-validate, pytest)"
python3 -m pip install --quiet --disable-pip-version-check -r tests/charts/requirements.txt

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "Rust tests"
cargo nextest run --workspace --locked --no-fail-fast

step "Helm chart tests"
python3 -m pytest tests/charts -q -p no:cacheprovider
