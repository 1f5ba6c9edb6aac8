"""Shared test set-up: offline, CPU, deterministic, small thread counts."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Skip `gpu` tests where there is no CUDA device."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def clip():
    """A tiny random CLIP (tests/tiny_clip.py, seed 3): the parity tests' model; a module may define its own."""
    from tests.tiny_clip import tiny_clip

    return tiny_clip(seed=3)


@pytest.fixture(scope="module")
def batch():
    """Four random 32-pixel images and their labels: the parity tests' one batch."""
    import torch

    torch.manual_seed(7)
    return torch.randn(4, 3, 32, 32), torch.tensor([0, 2, 1, 2])
