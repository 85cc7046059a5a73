"""Helpers of the packaging tests: the release build's outputs, ELF headers, and how Docker
resolves a Dockerfile's COPY for a target platform."""

import fnmatch
import os
import platform
import re
import shlex
import struct
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASE_BUILD = REPO / "scripts" / "release-build.sh"
DOCKERFILES = {
    "Dockerfile.agent-ctrl": "agent-controller",
    "Dockerfile.modelapi-ctrl": "modelapi-controller",
    "Dockerfile.mcp-ctrl": "mcpserver-controller",
    "Dockerfile.memorystore-ctrl": "memorystore-controller",
    "Dockerfile.authz-ctrl": "authz-controller",
    "Dockerfile.workflow-ctrl": "workflow-controller",
}
CONTROLLERS = sorted(DOCKERFILES.values())
# What the release publishes (scripts/release-build.sh's default).
RELEASED = [*CONTROLLERS, "kaosctl"]
# e_machine of the ELF header, by the arch part of a Rust target triple.
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())


def targets():
    """Docker arch -> Rust target triple, as scripts/release-build.sh supports them."""
    out = subprocess.run([str(RELEASE_BUILD), "--targets"], capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines())


def elf_header(path):
    """(class, data, machine) of an ELF file: (2, 1, m) is a 64-bit little-endian one."""
    with open(path, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF", f"{path} is not an ELF file"
    (machine,) = struct.unpack_from("<H", head, 18)
    return head[4], head[5], machine


def static_problems(path):
    """What would stop the binary from starting in an image with nothing but itself."""
    headers = subprocess.run(["readelf", "--program-headers", "--dynamic", str(path)],
                             capture_output=True, text=True, check=True).stdout
    problems = []
    if "INTERP" in headers:
        problems.append("it asks for a program interpreter (dynamically linked)")
    if "(NEEDED)" in headers:
        problems.append("it needs shared libraries")
    return problems


def instructions(dockerfile):
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    text = re.sub(r"\\\n", " ", Path(dockerfile).read_text())
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            yield keyword.upper(), args.strip()


def resolve_copy(dockerfile, arch):
    """The (source, destination) of the final stage's COPY from the build context when Docker builds
    for linux/ARCH. Docker's rules: the platform arguments (TARGETARCH, ...) are predefined, but a
    stage sees one only after declaring it with ARG; an undeclared one expands to nothing."""
    predefined = {"TARGETPLATFORM": f"linux/{arch}", "TARGETOS": "linux", "TARGETARCH": arch,
                  "TARGETVARIANT": "", "BUILDPLATFORM": f"linux/{HOST_ARCH}", "BUILDOS": "linux",
                  "BUILDARCH": HOST_ARCH or ""}
    declared, copies = {}, []
    for keyword, args in instructions(dockerfile):
        if keyword == "FROM":
            declared, copies = {}, []
        elif keyword == "ARG":
            name, _, default = args.partition("=")
            declared[name] = predefined.get(name, default)
        elif keyword == "COPY":
            words = shlex.split(args)
            if any(w.startswith("--from=") for w in words):
                continue
            paths = [re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: declared.get(m[1] or m[2], ""), w)
                     for w in words if not w.startswith("--")]
            copies.append(tuple(paths))
    assert len(copies) == 1, f"{dockerfile}: expected one COPY from the context in the final stage, got {copies}"
    return copies[0]


def dockerignored(path, dockerignore=REPO / ".dockerignore"):
    """Whether .dockerignore keeps PATH (relative to the context) out of the build context: the
    last pattern matching the path or one of its parent directories decides, `!` re-includes."""
    parts = Path(path).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for line in dockerignore.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            ignored = not negated
    return ignored


# The cargo profile the tests build with: cross-check (Cargo.toml: the release profile
# unoptimised), since the release profile's optimisation and LTO cost ~25 CPU-minutes per arch and
# change nothing the tests check; KAOS_RELEASE_PROFILE=release checks the shipping profile, and
# the release workflow checks its own release build (KAOS_RELEASE_DIR).
PROFILE = os.environ.get("KAOS_RELEASE_PROFILE", "cross-check")


def build(out, arch, binaries, profile=PROFILE):
    subprocess.run([str(RELEASE_BUILD), str(out), "--arch", arch, "--profile", profile, *binaries], check=True)
    return out


def prebuilt_dir():
    """KAOS_RELEASE_DIR: check an existing release build (the workflow's) instead of building."""
    value = os.environ.get("KAOS_RELEASE_DIR")
    return Path(value).resolve() if value else None


def binaries_to_check():
    """The binaries a release directory must hold: all that ship when checking the workflow's
    (KAOS_RELEASE_DIR), the controllers when the tests build them."""
    return RELEASED if prebuilt_dir() else CONTROLLERS
