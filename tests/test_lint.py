"""The code passes ruff with the project's configuration (pyproject.toml)."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is installed by the [test] extra")
def test_ruff_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "jaxcomm", "tests", "experiments"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
