#!/usr/bin/env bash
# Writes a CycloneDX 1.5 JSON SBOM next to each binary scripts/release-build.sh left in OUT_DIR:
# OUT_DIR/BINARY-linux-ARCH.cdx.json lists every crate compiled into that binary for that arch's
# target (from cargo's resolved graph, build-only dependencies left out), with versions, licenses
# and sources. Needs cargo-cyclonedx (the release workflow installs the version it pins).
#   scripts/release-sbom.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 1 ] || { echo "usage: scripts/release-sbom.sh OUT_DIR" >&2; exit 2; }
out=$1
# The commit's time instead of now, so the same commit gives the same SBOMs.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH

generated() { find crates tests -name '*_bin_*-unknown-linux-musl.cdx.json'; }
trap 'generated | xargs -r rm -f' EXIT
written=0
while read -r arch target; do
  # cargo-cyclonedx writes one file per binary of the workspace, next to its Cargo.toml.
  cargo cyclonedx --format json --spec-version 1.5 --describe binaries --target "$target" \
    --target-in-filename --no-build-deps --quiet
  for path in "$out"/*-linux-"$arch"; do
    [ -f "$path" ] || continue
    binary=$(basename "$path" "-linux-$arch")
    sbom=$(generated | grep "/${binary}_bin_${target}\.cdx\.json$" || true)
    [ -n "$sbom" ] || { echo "scripts/release-sbom.sh: cargo-cyclonedx wrote no SBOM for $binary" >&2; exit 1; }
    mv "$sbom" "$path.cdx.json"
    written=$((written + 1))
  done
done < <(scripts/release-build.sh --targets)
[ "$written" -gt 0 ] || { echo "scripts/release-sbom.sh: no BINARY-linux-ARCH in $out" >&2; exit 1; }
echo "scripts/release-sbom.sh: $written SBOMs in $out"
