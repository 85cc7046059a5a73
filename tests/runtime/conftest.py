"""What every test here needs: the real agent runtime's Python (KAOS_AGENT_RUNTIME). A test run
without it fails with the command that provides it, never skips: a green run means the real
runtime ran (docs/testing.md)."""

import os
import sys
from pathlib import Path

import pytest

# The tests import their shared helpers (fake_openai, test_real_runtime) by module name.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True, scope="session")
def agent_runtime():
    python = os.environ.get("KAOS_AGENT_RUNTIME")
    if not python:
        pytest.fail("KAOS_AGENT_RUNTIME is not set: "
                    "KAOS_AGENT_RUNTIME=$(scripts/python-tool agent-runtime python)", pytrace=False)
    if not Path(python).exists():
        pytest.fail(f"KAOS_AGENT_RUNTIME={python} does not exist", pytrace=False)
    return python
