"""The controller images. Docker cannot build here, so this checks each Dockerfile the way
`docker buildx build --platform linux/amd64,linux/arm64` reads it: for each platform, the file
its COPY names once TARGETARCH is resolved is in the build context and is the release build's
static binary for that arch (scripts/release-build.sh, which the tests run), and it runs."""

import re
import subprocess

import pytest

import release

ARCHES = sorted(release.targets())
DOCKERFILES = sorted(release.DOCKERFILES.items())


@pytest.mark.parametrize("dockerfile,binary", DOCKERFILES)
def test_dockerfile_copies_one_static_binary_onto_distroless_nonroot(dockerfile, binary):
    steps = list(release.instructions(release.REPO / dockerfile))
    keywords = [keyword for keyword, _ in steps]
    assert [args for keyword, args in steps if keyword == "FROM"] == ["gcr.io/distroless/static-debian12:nonroot"]
    # Nothing runs inside the image build, so buildx builds the arm64 image on an amd64 machine
    # without emulation (the release workflow sets up no QEMU).
    assert "RUN" not in keywords
    copy = next(args for keyword, args in steps if keyword == "COPY")
    # The binaries reach the workflow's image job as an artifact, which keeps no file modes.
    assert copy.startswith("--chmod=0755 "), "COPY must make the binary executable"
    assert ("USER", "65532:65532") in steps
    assert ("ENTRYPOINT", f'["/{binary}"]') in steps
    labels = dict(re.findall(r'org\.opencontainers\.image\.(\w+)="([^"]*)"', dict(steps)["LABEL"]))
    assert labels["title"] == binary
    assert set(labels) == {"title", "description", "source", "licenses", "version"}
    # The release passes --build-arg VERSION=<version>; the label follows it.
    assert labels["version"] == "${VERSION}" and ("ARG", "VERSION=dev") in steps


@pytest.mark.parametrize("dockerfile,binary", DOCKERFILES)
@pytest.mark.parametrize("arch", ARCHES)
def test_the_image_for_each_platform_gets_the_binary_of_its_arch(release_dir, arch, dockerfile, binary):
    source, destination = release.resolve_copy(release.REPO / dockerfile, arch)
    assert destination == f"/{binary}", "the ENTRYPOINT's path"
    assert source == f"dist/{binary}-linux-{arch}", "scripts/release-build.sh's output, built into dist/"
    assert not release.dockerignored(source), ".dockerignore keeps it out of the build context"
    path = release_dir(arch) / source.removeprefix("dist/")
    assert path.is_file(), f"scripts/release-build.sh --arch {arch} made no {path.name}"
    machine = release.elf_header(path)[2]
    assert machine == release.ELF_MACHINE[release.targets()[arch].split("-")[0]]
    assert release.static_problems(path) == []


@pytest.mark.parametrize("binary", release.CONTROLLERS)
def test_the_images_binaries_run_with_nothing_around_them(release_dir, binary):
    path = release_dir(release.HOST_ARCH) / f"{binary}-linux-{release.HOST_ARCH}"
    # An empty environment, as in the distroless image.
    result = subprocess.run([str(path), "--help"], capture_output=True, text=True, env={}, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "--metrics-bind-address" in result.stdout


def test_build_static_gives_the_release_binaries_for_this_machine(release_dir, tmp_path):
    # scripts/build-static.sh (benchmarks, local use) is the release build for the host arch under
    # plain names: the same files, not a second way to build them.
    released = release_dir(release.HOST_ARCH)
    if release.prebuilt_dir():
        pytest.skip("checks the tests' own build, not a prebuilt KAOS_RELEASE_DIR")
    subprocess.run([str(release.REPO / "scripts" / "build-static.sh"), "--profile", release.PROFILE, str(tmp_path),
                    *release.CONTROLLERS], check=True)
    for binary in release.CONTROLLERS:
        assert (tmp_path / binary).read_bytes() == (released / f"{binary}-linux-{release.HOST_ARCH}").read_bytes(), binary
