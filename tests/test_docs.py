"""The docs (docs/: tutorials, and the API reference a page per public module, Sphinx autodoc) build with warnings
as errors."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOT_API = {"__init__", "__main__", "cli", "demo"}  # the command line, documented by its --help


def test_every_public_module_is_in_the_reference():
    pages = sorted((ROOT / "docs" / "api").glob("*.rst"))
    automodule = re.compile(r"^\.\. automodule:: (jaxcomm\.[\w.]+)$", re.M)
    listed = {name for page in pages for name in automodule.findall(page.read_text())}
    modules = {f"jaxcomm.{p.stem}" for p in (ROOT / "jaxcomm").glob("*.py") if p.stem not in NOT_API}
    assert modules <= listed, sorted(modules - listed)
    for name in listed:  # a page per module, named after it, in the reference's table of contents
        assert (ROOT / "docs" / "api" / f"{name}.rst").is_file(), name
        assert f"\n   {name}\n" in (ROOT / "docs" / "api" / "index.rst").read_text(), name


def test_the_reference_builds_with_warnings_as_errors(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs",
                           str(tmp_path / "html")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    html = tmp_path / "html"
    assert "jaxcomm.clock.Cluster" in (html / "api" / "jaxcomm.clock.html").read_text()
    assert "jaxcomm.methods.Method" in (html / "api" / "jaxcomm.methods.html").read_text()
    assert "AgentFunctions.symbols" in (html / "api" / "jaxcomm.language.html").read_text()
    index = (html / "index.html").read_text()
    for page in sorted((ROOT / "docs" / "tutorials").glob("*.rst")):  # every tutorial built and linked
        assert (html / "tutorials" / f"{page.stem}.html").is_file() and f"tutorials/{page.stem}.html" in index
