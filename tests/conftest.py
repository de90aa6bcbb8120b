"""Shared fixtures: tiny synthetic image sets (unit tests only; experiments never use them)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcomm.data import ImageDataset, ImageSplit


def synthetic_split(rng: np.random.Generator, size: int, shape=(8, 8, 1), num_classes: int = 4) -> ImageSplit:
    """Noise images whose label is written as one bright pixel, so they are learnable."""
    labels = rng.integers(0, num_classes, size).astype(np.int32)
    images = (rng.random((size, *shape)) * 80).astype(np.uint8)
    images[np.arange(size), labels, labels, 0] = 255
    return ImageSplit(images, labels)


@pytest.fixture(scope="session")
def tiny_dataset() -> ImageDataset:
    rng = np.random.default_rng(0)
    return ImageDataset("synthetic", synthetic_split(rng, 240), synthetic_split(rng, 0), synthetic_split(rng, 64), 4)
