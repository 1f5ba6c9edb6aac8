"""Two float32 computations of the same function, compared by what float32 rounding can make of them.

Our recomposed towers (dear/model/internals.py) compute open_clip's functions with other matrix
shapes: the last block's CLS rows alone, a text trimmed of its padding, a prefix shared once per
group. A BLAS rounds a row of a product as its blocking for the whole call decides, and MKL
chooses that blocking per CPU maker (and per branch): on an AMD EPYC a row's bits came out other
in a [3, 64] @ [64, 64] product than in the same rows of a [51, 64] one, where Intel's kernels
happened to agree. So the two sides differ by a few float32 epsilons, by the CPU's choice.

A coordinate's rounding error scales with the magnitudes summed into it, about the largest
coordinate of its vector, not with the coordinate itself (one near 0 by cancellation has no
relative accuracy, and an `rtol` on it tests luck). The bound is therefore `ulps` float32
epsilons of each vector's largest magnitude: 64. Measured on the linear probe's features of the
tiny CLIP (100 random batches; MKL's own pick, its COMPATIBLE branch, its Intel code, ATen's
scalar kernels; AMD EPYC, 2026-12-05): at most 14; a wrong term (a bias, a layer scale, a mask)
is millions of epsilons off.

A gradient's entries each sum terms over the whole batch, tokens and classes, through a softmax
and a cross entropy: the bound is on the whole tensor's largest magnitude, GRADIENT_ULPS = 512.
Measured on the parity and shared-prefix tests' gradients (the four kernel choices above, each
with the tests' seeds and three other seeds; 2026-12-05): at most 68 (MaPLe's, MKL's Intel code).
"""

from __future__ import annotations

import torch

ULPS = 64
GRADIENT_ULPS = 512


def assert_same_up_to_rounding(ours: torch.Tensor, reference: torch.Tensor, ulps: int = ULPS,
                               per_vector: bool = True) -> None:
    """ours ≈ reference to `ulps` float32 epsilons of each vector's largest magnitude (the last dimension), or of
    the whole tensor's (`per_vector` False: a gradient, whose every entry sums terms of the whole batch's size)."""
    eps = torch.finfo(torch.float32).eps
    magnitude = reference.detach().abs()
    scale = (magnitude.amax(-1, keepdim=True) if per_vector else magnitude.max()).clamp_min(torch.finfo(torch.float32).tiny)
    torch.testing.assert_close(ours / scale, reference / scale, rtol=0.0, atol=ulps * eps,
                               msg=lambda found: f"{found}\n(in units of each vector's largest magnitude: "
                                                 f"allowed {ulps} float32 epsilons, tests/floats.py)")
