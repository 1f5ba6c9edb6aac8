"""dear.compute.blas: torch's CPU matrix products on numpy's OpenBLAS while compute.reproducible is on, the same products."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dear.compute import blas


@pytest.fixture
def installed():
    blas.install()
    blas.install()  # once is enough: a second call changes nothing
    yield
    blas.remove()


def _cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *shape, dtype=torch.float32: torch.randn(*shape, generator=g, dtype=dtype)  # noqa: E731
    a, b = r(5, 7), r(7, 3)
    batch_a, batch_b = r(4, 5, 7), r(4, 7, 3)
    return {
        "mm": lambda: torch.mm(a, b),
        "mm transposed": lambda: torch.mm(b.t(), a.t()),
        "mm strided": lambda: torch.mm(r(5, 14)[:, ::2], b),
        "mm expanded": lambda: torch.mm(r(1, 7).expand(5, 7), b),
        "mm float64": lambda: torch.mm(a.double(), b.double()),
        "mm empty": lambda: torch.mm(r(5, 0), r(0, 3)),
        "addmm": lambda: torch.addmm(r(3), a, b),
        "addmm scaled": lambda: torch.addmm(r(5, 3), a, b, beta=0.5, alpha=-2.0),
        "addmm beta 0": lambda: torch.addmm(torch.full((5, 3), float("nan")), a, b, beta=0),
        "bmm": lambda: torch.bmm(batch_a, batch_b),
        "bmm transposed": lambda: torch.bmm(batch_b.transpose(1, 2), batch_a.transpose(1, 2)),
        "baddbmm": lambda: torch.baddbmm(r(4, 5, 3), batch_a, batch_b, beta=2.0, alpha=0.5),
        "linear": lambda: F.linear(r(2, 6, 7), r(3, 7), r(3)),
        "einsum": lambda: torch.einsum("bhd,ehd->bhe", r(2, 4, 7), r(6, 4, 7)),
        "matmul": lambda: r(2, 3, 5, 7) @ r(7, 4),
        "int64": lambda: torch.mm(torch.arange(35).view(5, 7), torch.arange(21).view(7, 3)),
        "bfloat16": lambda: torch.mm(a.bfloat16(), b.bfloat16()),
    }


def test_the_products_are_torchs_up_to_rounding_and_other_dtypes_stay_torchs():
    expected = {name: case() for name, case in _cases().items()}
    blas.install()
    try:
        found = {name: case() for name, case in _cases().items()}
    finally:
        blas.remove()
    for name in expected:
        assert found[name].shape == expected[name].shape and found[name].dtype == expected[name].dtype, name
        if name in ("int64", "bfloat16"):
            assert torch.equal(found[name], expected[name]), name  # torch's own kernel
        else:
            torch.testing.assert_close(found[name], expected[name], rtol=1e-5, atol=1e-5, msg=name)
    again = {name: case() for name, case in _cases().items()}  # removed: torch's own kernels, bit for bit
    assert all(torch.equal(again[name], expected[name]) for name in expected if name != "addmm beta 0")


def test_products_and_their_gradients_go_through_numpy(installed, monkeypatch):
    calls = []
    matmul = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b: calls.append((a.shape, b.shape)) or matmul(a, b))
    weight = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    F.linear(x, weight).square().sum().backward()
    assert len(calls) == 3  # the forward product and the two gradients
    assert torch.autograd.gradcheck(lambda u, v: torch.bmm(u, v), (torch.randn(2, 3, 4, dtype=torch.float64,
                                    requires_grad=True), torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)))


def test_wrong_shapes_and_dtypes_raise_torchs_errors(installed):
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(torch.randn(2, 3), torch.randn(4, 5))
    with pytest.raises(RuntimeError, match="same dtype|expected"):
        torch.mm(torch.randn(2, 3), torch.randn(3, 4, dtype=torch.float64))
