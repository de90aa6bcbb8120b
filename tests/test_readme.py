"""Every ```python block of README.md runs, on the shipped MNIST sample; what its first example computes is checked
here (the README's code is the example, not a copy of it). The longer examples live in the tutorials
(docs/tutorials/*.rst), run and checked by tests/test_tutorials.py."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re

import pytest

from jaxcomm import data, methods

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def test_readme_has_python_blocks():
    assert BLOCKS


def test_the_readme_starts_with_the_two_commands_and_keeps_its_test_section():
    text = README.read_text()
    first = re.search(r"^```sh\n(.*?)^```", text, re.M | re.S).group(1).splitlines()
    assert first[0].endswith("pip install -e . && jaxcomm demo")
    assert first[1] == 'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && pytest'
    assert "\n## Tests\n" in text
    assert len(text.splitlines()) <= 250  # a user's guide; the rest is in docs/


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)\)", README.read_text())
    assert links
    missing = [link for link in links if "://" not in link and not (README.parent / link).exists()]
    assert not missing, missing


@pytest.fixture(scope="module")
def namespaces() -> list[dict]:
    """Each block run once, on its own: in a fresh namespace, nothing from another block (a reader copies one
    block). The full datasets the README names are the shipped 5,000-digit MNIST sample here (no download)."""
    sample = data.load_mnist_sample()
    done: list[dict] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in ("load_mnist", "load_cifar10", "load_dataset"):
            patch.setattr(data, name, lambda *args, **kwargs: sample)
        for number, block in enumerate(BLOCKS, 1):
            namespace = {"__name__": f"readme_block_{number}"}
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)  # noqa: S102
            done.append(namespace)
    return done


def test_readme_python_blocks_run(namespaces):
    assert len(namespaces) == len(BLOCKS)


def test_the_first_example_trains_8_nodes_on_the_exponential_graph_sending_soft_labels(namespaces):
    out = namespaces[0]["out"]
    final = out["final"]
    counters = final["counters"]
    assert counters["received"] == counters["consumed"] + counters["dropped"] + counters["pending"]
    assert counters["consumed"] > 0 and counters["sent"] == counters["received"]  # every out-neighbour is reached
    # private shards: the 32 uint8 28 x 28 images + 10 float32 logits a sample + the 8-byte header
    assert out["network"].message_bytes == 32 * 784 + 32 * 10 * 4 + 8
    assert final["avg_accuracy"] > 60.0  # chance is 10 %


def test_the_second_example_books_every_methods_bytes(namespaces):
    example = namespaces[1]
    assert [m.name for m in example["zoo"]][0] == "isolated"
    assert example["final"]["bytes"]["per_node_step"] > 0  # the last method, SPARTA, sends parameters


def test_the_method_table_names_every_method_factory_and_each_makes_a_method():
    """The README's method table, recounted from the code: every public factory of a method module that returns a
    Method appears in it, and every value it names is one."""

    text = README.read_text()
    table = text[text.index("| method | value |"):]
    table = table[:table.index("\n\n")]
    named = set(re.findall(r"`(\w+\.\w+)\(", table))
    modules = ("network", "gossip", "sgp", "data_parallel", "lgc", "local_sgd", "leader_sgd", "codistillation",
               "sparta", "federated")
    factories = set()
    for name in modules:
        module = importlib.import_module(f"jaxcomm.{name}")
        for attr, value in vars(module).items():
            if inspect.isfunction(value) and value.__module__ == module.__name__ and not attr.startswith("_") \
                    and inspect.signature(value).return_annotation in ("methods.Method", methods.Method):
                factories.add(f"{name}.{attr}")
    assert factories <= named, sorted(factories - named)
    for value in named:
        module, attr = value.split(".")
        assert callable(getattr(importlib.import_module(f"jaxcomm.{module}"), attr)), value
