#!/usr/bin/env bash
# Installs, if missing, the pinned tools scripts/release-build.sh needs, so CI (scripts/test.sh)
# and the release workflow (.github/workflows/release.yml) use the very same ones:
#   - zig, from PyPI's `ziglang` wheel (the official zig build, run as `python3 -m ziglang`):
#     a C compiler and linker for every target, with musl's headers and libc for each. It links the
#     static musl binaries and compiles ring's C and assembly, for arm64 from an amd64 machine
#     and back, with no per-arch cross toolchain (musl-gcc only targets the host);
#   - cargo-zigbuild, which points cargo's linker and the cc crate at zig for the --target;
#   - the rustup targets x86_64-unknown-linux-musl and aarch64-unknown-linux-musl.
#
#   scripts/release-tools.sh            # install what is missing or not at the pinned version
#   scripts/release-tools.sh --check    # only say whether everything is there (exit 1 if not)
set -euo pipefail
cd "$(dirname "$0")/.."

# The pins. A bump: change them here; scripts/test.sh and the workflow pick them up.
zig_version=0.15.2
cargo_zigbuild_version=0.24.1
targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)

check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "usage: scripts/release-tools.sh [--check]" >&2; exit 2 ;;
esac

missing=()
if [ "$(python3 -m ziglang version 2>/dev/null)" != "$zig_version" ]; then missing+=(zig); fi
if [ "$(cargo-zigbuild --version 2>/dev/null)" != "cargo-zigbuild $cargo_zigbuild_version" ]; then missing+=(cargo-zigbuild); fi
installed_targets=$(rustup target list --installed)
for target in "${targets[@]}"; do
  if ! grep -qx "$target" <<<"$installed_targets"; then missing+=("$target"); fi
done

if [ "${#missing[@]}" = 0 ]; then
  echo "release tools: zig $zig_version, cargo-zigbuild $cargo_zigbuild_version, targets ${targets[*]}"
  exit 0
fi
if [ "$check_only" = 1 ]; then
  echo "release tools missing or not at the pinned version: ${missing[*]} (run scripts/release-tools.sh)" >&2
  exit 1
fi
for tool in "${missing[@]}"; do
  case "$tool" in
    zig) python3 -m pip install --quiet --disable-pip-version-check "ziglang==$zig_version" ;;
    cargo-zigbuild) cargo install cargo-zigbuild --version "$cargo_zigbuild_version" --locked ;;
    *) rustup target add "$tool" ;;
  esac
done
exec "$0" --check
