#!/usr/bin/env bash
# Builds the release binaries: static (musl), stripped of debug info, for linux/amd64 and
# linux/arm64, cross-compiled from any Linux machine with cargo-zigbuild (scripts/tools.sh installs
# it and zig). The release workflow runs it, the images copy its output, and CI runs it for
# both arches (tests/packaging), so what ships is what CI built.
#
#   scripts/release-build.sh OUT_DIR [--arch amd64|arm64|all] [--profile PROFILE] [BINARY...]
#   scripts/release-build.sh --targets     # prints "ARCH RUST_TARGET" per supported arch
#
# Writes OUT_DIR/BINARY-linux-ARCH (ARCH as Docker's TARGETARCH spells it: what the Dockerfiles
# copy) and OUT_DIR/SHA256SUMS over every BINARY-linux-ARCH in OUT_DIR; a relative OUT_DIR is taken
# from the repository root. --arch defaults to all, the binaries to the controllers and
# kaosctl, --profile to release (what ships); CI's arm64 step passes cross-check (Cargo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A rust_target=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
arches=(amd64 arm64)
default_binaries=(agent-controller modelapi-controller mcpserver-controller memorystore-controller authz-controller workflow-controller kaosctl)
usage="usage: scripts/release-build.sh OUT_DIR [--arch amd64|arm64|all] [--profile PROFILE] [BINARY...] | --targets"

if [ "${1:-}" = --targets ]; then
  for arch in "${arches[@]}"; do echo "$arch ${rust_target[$arch]}"; done
  exit 0
fi
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then echo "$usage" >&2; exit 2; fi
out=$1; shift
selected=all
profile=release
binaries=()
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; selected=$2; shift 2 ;;
    --arch=*) selected=${1#--arch=}; shift ;;
    --profile) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; profile=$2; shift 2 ;;
    --profile=*) profile=${1#--profile=}; shift ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) binaries+=("$1"); shift ;;
  esac
done
[ "${#binaries[@]}" -gt 0 ] || binaries=("${default_binaries[@]}")
if [ "$selected" = all ]; then
  build_arches=("${arches[@]}")
elif [ -n "${rust_target[$selected]:-}" ]; then
  build_arches=("$selected")
else
  echo "scripts/release-build.sh: unsupported arch '$selected' (supported: ${arches[*]} or all)" >&2
  exit 2
fi

scripts/tools.sh check
PATH="$(scripts/tools.sh bin):$PATH"

target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
mkdir -p "$out"
for arch in "${build_arches[@]}"; do
  target=${rust_target[$arch]}
  # One cargo run per binary, so a binary's dependency features are its own, as if built alone:
  # the same file whatever else is built with it (CI builds only the controllers).
  for binary in "${binaries[@]}"; do
    cargo zigbuild --profile "$profile" --locked --target "$target" -p "$binary"
    cp "$target_dir/$target/$profile/$binary" "$out/$binary-linux-$arch"
  done
done
names=()
for arch in "${arches[@]}"; do names+=(-o -name "*-linux-$arch"); done
(cd "$out" && find . -maxdepth 1 -type f \( "${names[@]:1}" \) -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
