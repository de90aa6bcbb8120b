"""Every ```python block of README.md runs, on the shipped MNIST sample."""

from __future__ import annotations

import pathlib
import re

import pytest

from jaxcomm import data

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def test_readme_has_python_blocks():
    assert BLOCKS


@pytest.fixture
def sample_data(monkeypatch):
    """The full datasets the README names are the shipped 5,000-digit MNIST sample here (no download)."""
    sample = data.load_mnist_sample()
    for name in ("load_mnist", "load_cifar10"):
        monkeypatch.setattr(data, name, lambda *args, **kwargs: sample)
    monkeypatch.setattr(data, "load_dataset", lambda *args, **kwargs: sample)


def test_readme_python_blocks_run(sample_data):
    """Each block in a namespace of its own; one that needs a name the previous block defined continues it."""
    previous: dict = {}
    for number, block in enumerate(BLOCKS, 1):
        code = compile(block, f"README.md python block {number}", "exec")
        namespace = {"__name__": f"readme_block_{number}"}
        try:
            exec(code, namespace)  # noqa: S102
        except NameError as error:
            if error.name not in previous:
                raise
            namespace = dict(previous)
            exec(code, namespace)  # noqa: S102
        previous = namespace
