"""The release build, scripts/release-build.sh, and the workflow that publishes its output
(.github/workflows/release.yml, which cannot run here): static binaries for every arch the images
are built for, with their checksums, and a tag that agrees with the versions the tree states.

The arm64 tests cross-compile (cargo-zigbuild): they run only with KAOS_CROSS_BUILD=1, which
scripts/test.sh sets in its own step; with KAOS_RELEASE_DIR they check a finished release build."""

import hashlib
import json
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

import release

TARGETS = release.targets()
ARCHES = sorted(TARGETS)
WORKFLOW = release.REPO / ".github" / "workflows" / "release.yml"


def test_the_script_builds_linux_amd64_and_arm64_with_musl():
    assert TARGETS == {"amd64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


@pytest.mark.parametrize("binary", release.binaries_to_check())
@pytest.mark.parametrize("arch", ARCHES)
def test_each_binary_is_a_static_executable_for_its_arch(release_dir, arch, binary):
    path = release_dir(arch) / f"{binary}-linux-{arch}"
    assert path.is_file(), f"scripts/release-build.sh made no {path.name}"
    elf_class, data, machine = release.elf_header(path)
    assert (elf_class, data) == (2, 1), "a 64-bit little-endian ELF"
    assert machine == release.ELF_MACHINE[TARGETS[arch].split("-")[0]], f"built for e_machine {machine}, not {arch}"
    assert release.static_problems(path) == []


@pytest.mark.parametrize("arch", ARCHES)
def test_sha256sums_lists_every_binary_with_its_digest(release_dir, arch):
    directory = release_dir(arch)
    listed = {}
    for line in (directory / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.lstrip("*")] = digest
    built = {p.name for arch_ in ARCHES for p in directory.glob(f"*-linux-{arch_}")}
    assert set(listed) == built
    assert {f"{b}-linux-{arch}" for b in release.binaries_to_check()} <= built
    for name in built:
        assert listed[name] == hashlib.sha256((directory / name).read_bytes()).hexdigest(), name
    # What a user runs on the downloaded files.
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=directory, check=True)


def test_an_unknown_arch_is_refused_before_building(tmp_path):
    result = subprocess.run([str(release.RELEASE_BUILD), str(tmp_path / "out"), "--arch", "s390x"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "unsupported arch 's390x' (supported: amd64 arm64 or all)" in result.stderr
    assert not (tmp_path / "out").exists()


def _job_steps(workflow, job):
    return workflow["jobs"][job]["steps"]


def _commands(steps):
    for step in steps:
        for line in step.get("run", "").splitlines():
            yield shlex.split(line, comments=True)


def test_the_workflow_publishes_what_the_script_builds_for_every_arch():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as true

    # The binaries job builds every arch into the directory it uploads and the images job downloads.
    builds = [c for c in _commands(_job_steps(workflow, "binaries")) if c[:1] == ["scripts/release-build.sh"]]
    assert builds == [["scripts/release-build.sh", "dist", "--arch", "all"]]
    upload = next(s for s in _job_steps(workflow, "binaries") if s.get("uses", "").startswith("actions/upload-artifact@"))
    download = next(s for s in _job_steps(workflow, "images") if s.get("uses", "").startswith("actions/download-artifact@"))
    assert upload["with"]["path"].rstrip("/") == download["with"]["path"].rstrip("/") == "dist"
    assert upload["with"]["name"] == download["with"]["name"]

    # One image per Dockerfile, for exactly the arches the script builds, named as docs/release.md says.
    images = workflow["jobs"]["images"]
    matrix = {entry["image"]: entry["dockerfile"] for entry in images["strategy"]["matrix"]["include"]}
    assert matrix == {binary: dockerfile for dockerfile, binary in release.DOCKERFILES.items()}
    push = next(s for s in images["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert sorted(push["with"]["platforms"].split(",")) == [f"linux/{arch}" for arch in ARCHES]
    assert push["with"]["file"] == "${{ matrix.dockerfile }}"
    assert workflow["env"]["REGISTRY"] == "ghcr.io/kaos-rs"
    assert push["with"]["tags"] == "${{ env.REGISTRY }}/${{ matrix.image }}:${{ needs.version.outputs.version }}"


def test_the_tree_states_one_version_and_the_tag_must_match_it():
    script = str(release.REPO / "scripts" / "release-version")
    version = subprocess.run([script], capture_output=True, text=True, check=True).stdout.strip()
    metadata = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                                         cwd=release.REPO, capture_output=True, text=True, check=True).stdout)
    assert {p["name"]: p["version"] for p in metadata["packages"]}["kaosctl"] == version
    assert subprocess.run([script, f"v{version}"], capture_output=True, text=True).returncode == 0
    wrong = subprocess.run([script, f"v{version}.1"], capture_output=True, text=True)
    assert wrong.returncode == 1 and f"tag v{version}.1 is not v{version}" in wrong.stderr
    # The workflow's first job checks the pushed tag, and every other job waits for it.
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert any('scripts/release-version "$GITHUB_REF_NAME"' in s.get("run", "") for s in _job_steps(workflow, "version"))
    for name, job in workflow["jobs"].items():
        if name != "version":
            assert "version" in job["needs"], name


def test_a_chart_left_at_the_old_version_stops_the_release(tmp_path):
    # A copy of what the script reads, with one subchart's appVersion (its default image tag) not bumped.
    (tmp_path / "scripts").mkdir()
    shutil.copy(release.REPO / "scripts" / "release-version", tmp_path / "scripts")
    shutil.copy(release.REPO / "Cargo.toml", tmp_path)
    shutil.copytree(release.REPO / "charts", tmp_path / "charts")
    chart = tmp_path / "charts" / "kaos" / "charts" / "agent-controller" / "Chart.yaml"
    text = chart.read_text()
    assert "\nappVersion: " in text
    chart.write_text(re.sub(r"\nappVersion: .*", '\nappVersion: "0.0.0-old"', text))
    result = subprocess.run([str(tmp_path / "scripts" / "release-version")], capture_output=True, text=True)
    assert result.returncode == 1
    assert "0.0.0-old    charts/kaos/charts/agent-controller/Chart.yaml appVersion" in result.stderr
