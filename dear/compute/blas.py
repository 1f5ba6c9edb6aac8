"""`compute.reproducible`'s matrix products: torch's CPU float products on numpy's OpenBLAS, at its Haswell kernels.

MKL, torch's BLAS, picks its code by the CPU's maker: its AVX2 branch on Intel CPUs only,
its own pick elsewhere, so an AMD CPU computed other bytes than an Intel one under
`MKL_CBWR=AVX2,STRICT`. Its COMPATIBLE branch is one code on both makers, but SSE2 only:
a pretraining step of the demo's backbone took 2.2x the time of MKL's own kernels
(docs/compute.md). OpenBLAS, forced to its Haswell kernels (`OPENBLAS_CORETYPE=Haswell`,
dear.compute.reproducible), runs one AVX2 code on every AVX2 CPU, its blocking fixed when it was
compiled (OpenMathLib/OpenBLAS kernel/setparam-ref.c: for HASWELL, P, Q and R are the
compile-time defaults; the L2 size it reads is not used), at about MKL's speed: 1.05x.

So while the setting is on, `install` hands aten::mm, addmm, bmm and baddbmm of float32 and
float64 CPU tensors to `numpy.matmul` (numpy's OpenBLAS): every product of a linear layer,
of attention on the math kernel, of einsum, in the forward and the backward pass. What is
not dispatched through these four (a convolution's im2col product, the fused attention
kernel's, `out=` forms, other dtypes) stays on MKL, on its COMPATIBLE branch. OpenBLAS runs
one thread (`one_thread`, kept by dear.compute.cpus): its threads, spinning between products while
torch's OpenMP threads worked, made a 2-thread pretraining step 3.6x slower than the setting
off (benchmarks/reproducible_cost.py, 2026-12-05); so the products' bytes are those of one
thread at any torch thread count. `remove` gives torch its own kernels back.
"""

from __future__ import annotations

import warnings
from typing import Any

OPS = ("mm", "addmm", "bmm", "baddbmm")
NAME = "OpenBLAS (numpy)"  # what in_force records as the products' library while installed
_library: list[Any] = []  # the torch.library registration while installed


def installed() -> bool:
    return bool(_library)


def install() -> None:
    """Register the OpenBLAS kernels for CPU tensors (once; torch's own come back with `remove`)."""
    if _library:
        return
    import torch

    library = torch.library.Library("aten", "IMPL")
    kernels = {"mm": _mm, "addmm": _addmm, "bmm": _bmm, "baddbmm": _baddbmm}
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for op in OPS:
            library.impl(op, kernels[op], "CPU")
    _library.append(library)
    one_thread()


def one_thread() -> None:
    """numpy's OpenBLAS on one thread (the products'; dear.compute.cpus calls it after setting a job's threads)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def remove() -> None:
    if _library:
        _library.pop()._destroy()


def _numpy_floats(*tensors) -> bool:
    import torch

    dtype = tensors[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.dtype == dtype for t in tensors)


def _array(tensor):
    """A tensor's numpy view, copied first where its last two dimensions are neither row- nor column-major
    (numpy then multiplies with its own loop instead of the BLAS)."""
    tensor = tensor.detach().resolve_neg()
    stride, shape = tensor.stride(), tensor.shape
    row_major = stride[-1] == 1 and stride[-2] >= max(1, shape[-1])
    column_major = stride[-2] == 1 and stride[-1] >= max(1, shape[-2])
    return (tensor if row_major or column_major else tensor.contiguous()).numpy()


def _product(a, b):
    """a [..., M, K] @ b [..., K, N] on OpenBLAS -> a new tensor [..., M, N]."""
    import numpy as np
    import torch

    return torch.from_numpy(np.matmul(_array(a), _array(b)))


def _scaled(product, added, beta, alpha):
    """beta * added + alpha * product, as addmm and baddbmm define it (beta 0: `added` is not read)."""
    if alpha != 1:
        product.mul_(alpha)
    if beta == 0:
        return product
    return product.add_(added, alpha=beta) if beta != 1 else product.add_(added)


def _mm(a, b):  # [M, K] @ [K, N]
    import torch

    if not _numpy_floats(a, b) or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return torch.ops.aten.mm.out(a, b, out=a.new_empty(0))  # torch's own kernel (and its errors)
    return _product(a, b)


def _addmm(added, a, b, *, beta=1, alpha=1):  # beta * added + alpha * [M, K] @ [K, N]
    import torch

    if not _numpy_floats(added, a, b) or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return torch.ops.aten.addmm.out(added, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
    return _scaled(_product(a, b), added, beta, alpha)


def _bmm(a, b):  # [B, M, K] @ [B, K, N]
    import torch

    if not _numpy_floats(a, b) or a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return torch.ops.aten.bmm.out(a, b, out=a.new_empty(0))
    return _product(a, b)


def _baddbmm(added, a, b, *, beta=1, alpha=1):  # beta * added + alpha * [B, M, K] @ [B, K, N]
    import torch

    if (not _numpy_floats(added, a, b) or a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]
            or a.shape[2] != b.shape[1]):
        return torch.ops.aten.baddbmm.out(added, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
    return _scaled(_product(a, b), added, beta, alpha)
