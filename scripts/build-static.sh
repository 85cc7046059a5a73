#!/usr/bin/env bash
# Builds static (musl) release binaries of the given packages for this machine's arch into
# OUT_DIR/BINARY, e.g. for the benchmarks (crates/kaos-bench). It is scripts/release-build.sh for
# the host arch (the same cargo-zigbuild build, so the same binaries the images and the release
# ship), under plain names; scripts/tools.sh installs the tools it needs.
#   scripts/build-static.sh [--profile PROFILE] OUT_DIR BINARY [BINARY...]   (PROFILE: release)
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/build-static.sh [--profile PROFILE] OUT_DIR BINARY [BINARY...]"
profile=release
if [ "${1:-}" = --profile ]; then
  [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
  profile=$2; shift 2
fi
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
out=$1; shift
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "scripts/build-static.sh: no static build for $(uname -m)" >&2; exit 1 ;;
esac
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
scripts/release-build.sh "$staging" --arch "$arch" --profile "$profile" "$@"
mkdir -p "$out"
for binary in "$@"; do
  cp "$staging/$binary-linux-$arch" "$out/$binary"
done
