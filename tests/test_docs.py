"""The API reference (docs/, Sphinx autodoc of the public modules) builds with warnings as errors."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOT_API = {"__init__", "__main__", "cli", "demo"}  # the command line, documented by its --help


def test_every_public_module_is_in_the_reference():
    listed = set(re.findall(r"^\.\. automodule:: (jaxcomm\.[\w.]+)$", (ROOT / "docs" / "index.rst").read_text(), re.M))
    modules = {f"jaxcomm.{p.stem}" for p in (ROOT / "jaxcomm").glob("*.py") if p.stem not in NOT_API}
    assert modules <= listed, sorted(modules - listed)


def test_the_reference_builds_with_warnings_as_errors(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs",
                           str(tmp_path / "html")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "html" / "index.html").read_text()
    assert "jaxcomm.clock.Cluster" in page and "jaxcomm.methods.Method" in page
