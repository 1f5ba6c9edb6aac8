"""Shared test set-up: offline, CPU, deterministic, small thread counts.

pytest applies this file to every folder of tests/, which is grouped as dear/ is (docs/testing.md, "Where a test
lives"): tests/compute/ tests dear/compute/, and so on; tests/e2e/ runs whole studies through the engines.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# `dear` commands run through warm servers (dear/server/), as a user's do: in a folder of this test process's own,
# each ending a minute after its last command, all stopped at the end (pytest_unconfigure)
if "DEAR_SERVER_DIR" not in os.environ:
    import tempfile

    os.environ["DEAR_SERVER_DIR"] = tempfile.mkdtemp(prefix="dear-servers-")
    os.environ.setdefault("DEAR_SERVER_IDLE", "60")
    _OWN_SERVERS = os.environ["DEAR_SERVER_DIR"]
else:
    _OWN_SERVERS = None

import pytest  # noqa: E402


def pytest_unconfigure(config):
    """Stop the warm servers this test process started (each after the commands it runs)."""
    if _OWN_SERVERS:
        import shutil

        from dear.server.wire import control

        control("stop", {"DEAR_SERVER_DIR": _OWN_SERVERS})
        shutil.rmtree(_OWN_SERVERS, ignore_errors=True)


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
