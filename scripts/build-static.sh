#!/usr/bin/env bash
# Builds static (musl) release binaries of the given controllers into OUT_DIR.
# The Dockerfiles run exactly this; tests/packaging runs it too, since Docker cannot run here.
#   scripts/build-static.sh OUT_DIR BINARY [BINARY...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1; shift
target=x86_64-unknown-linux-musl
packages=()
for binary in "$@"; do packages+=(-p "$binary"); done
cargo build --release --locked --target "$target" "${packages[@]}"
mkdir -p "$out"
for binary in "$@"; do
  cp "target/$target/release/$binary" "$out/$binary"
done
