import os

import pytest

import release


@pytest.fixture(scope="session")
def release_dir(tmp_path_factory):
    """release_dir(arch): a directory holding scripts/release-build.sh's output for ARCH.

    KAOS_RELEASE_DIR names an existing one (the release workflow checks what it is about to
    publish). Otherwise the script builds the controllers (the images' binaries) with
    release.PROFILE: for the host arch always, for another arch (a cross build) only with
    KAOS_CROSS_BUILD=1, which scripts/test.sh sets in its own step (docs/testing.md). One build per
    arch per session."""
    built = {}

    def get(arch):
        prebuilt = release.prebuilt_dir()
        if prebuilt:
            return prebuilt
        if arch not in built:
            if arch != release.HOST_ARCH and os.environ.get("KAOS_CROSS_BUILD") != "1":
                pytest.skip(f"cross build for {arch}: set KAOS_CROSS_BUILD=1 (scripts/test.sh does, in its own step)")
            built[arch] = release.build(tmp_path_factory.mktemp(f"release-{arch}"), arch, release.CONTROLLERS)
        return built[arch]

    return get

