"""The code passes ruff with the project's configuration (pyproject.toml), and no function grows past ~80 lines."""

from __future__ import annotations

import ast
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


def test_no_function_is_longer_than_80_lines():
    """A function that needs more than ~80 lines does more than one job (issue 59): split it where it reads."""
    long = []
    for folder in ("jaxcomm", "experiments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines)")
    assert long == []
