#!/usr/bin/env python3
"""Regenerates deploy/kaos.yaml, the default rendering of charts/kaos for installs without Helm."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "charts"))
from chart import REPO, default_manifest  # noqa: E402

(REPO / "deploy" / "kaos.yaml").write_text(default_manifest())
print("wrote deploy/kaos.yaml")
