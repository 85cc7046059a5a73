"""The controller images: Docker cannot build here, so this checks each Dockerfile's shape and
runs the build step they share (scripts/build-static.sh), then checks the binaries are static
and run."""

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = {
    "Dockerfile.agent-ctrl": "agent-controller",
    "Dockerfile.modelapi-ctrl": "modelapi-controller",
    "Dockerfile.mcp-ctrl": "mcpserver-controller",
}


@pytest.mark.parametrize("dockerfile,binary", sorted(IMAGES.items()))
def test_dockerfile_builds_one_static_binary_onto_distroless_nonroot(dockerfile, binary):
    text = (REPO / dockerfile).read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert len(stages) == 2, "multi-stage: a build stage and the final image"
    assert stages[-1] == "gcr.io/distroless/static-debian12:nonroot"
    assert f"RUN scripts/build-static.sh /out {binary}\n" in text
    assert "musl-tools" in text and "rustup target add x86_64-unknown-linux-musl" in text
    assert f"COPY --from=build /out/{binary} /{binary}" in text
    assert "USER 65532:65532" in text
    assert f'ENTRYPOINT ["/{binary}"]' in text
    for label in ["title", "description", "source", "licenses", "version"]:
        assert f"org.opencontainers.image.{label}=" in text, label


@pytest.fixture(scope="module")
def built():
    out = Path(tempfile.mkdtemp(prefix="kaos-static-"))
    subprocess.run([str(REPO / "scripts" / "build-static.sh"), str(out), *IMAGES.values()], check=True)
    return out


@pytest.mark.parametrize("binary", sorted(IMAGES.values()))
def test_the_build_step_makes_static_binaries_that_run(built, binary):
    path = built / binary
    headers = subprocess.run(["readelf", "--program-headers", "--dynamic", str(path)], capture_output=True, text=True, check=True).stdout
    assert "INTERP" not in headers, "no program interpreter: nothing to load from the (empty) image"
    assert "NEEDED" not in headers, "no shared libraries"
    # It runs with an empty environment, as in the distroless image.
    result = subprocess.run([str(path), "--help"], capture_output=True, text=True, env={}, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "--metrics-bind-address" in result.stdout
