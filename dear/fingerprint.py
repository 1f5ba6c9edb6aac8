"""The fingerprint of `compute.reproducible`: a fixed battery of the demo's math, each item's bytes hashed.

The setting promises the same bytes on every x86-64 CPU with AVX2 (docs/compute.md).
Whether a machine keeps the promise shows in a few seconds: this battery computes
what the demo computes, small — the matrix products in the layouts the models use
(ViT-B/16's and the embedded backbone's), a stride convolution as patch embedding,
softmax, layer norm, GELU, attention, the elementwise math torch hands to
MKL (sqrt, exp, log, erf), AdamW and SGD steps, a few pretraining steps
and a few training steps of the tiny backbone (dear-world-tiny), image features, and
the linear probe's fit through scikit-learn (numpy's OpenBLAS) — and hashes each
item's outputs (sha256 of their bytes). `tests/fingerprint.json` holds the hashes
of the machine that wrote it; `tests/test_fingerprint.py` recomputes them in `make
test`, so every machine that runs the suite checks the promise, and a mismatch
names the CPU, the caps in force and the first item that moved.

    python -m dear.fingerprint            # compute, compare with tests/fingerprint.json (exit 1 when one moved)
    python -m dear.fingerprint --write    # store this machine's values (after a deliberate change of the math)
    python -m dear.fingerprint --json     # print the hashes and what was in force, as JSON

The setting is applied before torch and numpy load (this module imports neither
at its top), as every `dear` job applies it. `--cbwr VALUE` replaces MKL_CBWR
('none': unset) and `--mkl-products` leaves the matrix products on MKL, to
measure which of MKL's branches change bytes on a CPU (benchmarks/mkl_branches.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable

STORED = Path(__file__).resolve().parents[1] / "tests" / "fingerprint.json"
WRITE = "python -m dear.fingerprint --write"
THREADS = 1  # every item but the 2-thread pretraining: the demo's jobs run one thread each
VITB16 = dict(batch=2, tokens=197, width=768, heads=12, embed=512, classes=100, patch=16, image=224)
WORLD = dict(batch=64, tokens=65, width=128, heads=8, embed=128, patch=8, image=64)  # dear-world's image tower


# --- helpers -----------------------------------------------------------------------

def _generator(seed: int):
    import torch

    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int, scale: float = 1.0):
    import torch

    return torch.randn(*shape, generator=_generator(seed)) * scale


def digest(*outputs: Any) -> str:
    """sha256 of outputs' bytes (tensors, numpy arrays, numbers), each with its dtype and shape."""
    import numpy as np
    import torch

    hasher = hashlib.sha256()
    for output in outputs:
        if isinstance(output, torch.Tensor):
            output = output.detach().contiguous().cpu().numpy()
        array = np.ascontiguousarray(np.asarray(output))
        hasher.update(f"{array.dtype}{array.shape}".encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()


def _state(module) -> list:
    return [tensor for _, tensor in sorted(module.state_dict().items())]


# --- the battery: each item returns the tensors it computed ------------------------

def random_inputs() -> list:
    """The inputs every other item draws from: torch's CPU generator and numpy's (not vendor math, but checked first)."""
    import numpy as np

    return [_randn(4096, seed=0), np.random.default_rng(0).normal(size=4096)]


def qkv_projection(shape: dict) -> Callable[[], list]:
    """[B*T, D] @ [D, 3D] + bias, as F.linear of the in-projection (internals._qkv), and of the CLS rows alone."""
    def item() -> list:
        import torch.nn.functional as F

        rows, width = shape["batch"] * shape["tokens"], shape["width"]
        x, weight, bias = _randn(rows, width, seed=1), _randn(3 * width, width, seed=2, scale=0.05), _randn(3 * width, seed=3)
        return [F.linear(x, weight, bias), F.linear(x[:: shape["tokens"]], weight, bias)]  # all rows; CLS rows [B, 3D]
    return item


def attention_products(shape: dict) -> Callable[[], list]:
    """Attention by hand as the math kernel computes it: Q K^T [B*H, T, T] and softmax(.) V [B*H, T, d]."""
    def item() -> list:
        import torch

        heads, tokens = shape["batch"] * shape["heads"], shape["tokens"]
        d = shape["width"] // shape["heads"]
        q, k, v = (_randn(heads, tokens, d, seed=seed) for seed in (4, 5, 6))
        scores = torch.bmm(q, k.transpose(1, 2)) / d**0.5
        return [scores, torch.bmm(scores.softmax(-1), v)]
    return item


def fused_attention() -> list:
    """F.scaled_dot_product_attention, forward and backward, on the math kernel (pretraining) and torch's pick."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = []
    for backends in ([SDPBackend.MATH], [SDPBackend.FLASH_ATTENTION]):
        q, k, v = (_randn(8, 8, WORLD["tokens"], 16, seed=seed).requires_grad_() for seed in (7, 8, 9))
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q, k, v)
        o.square().sum().backward()
        out += [o, q.grad, k.grad, v.grad]
    return out


def class_logits() -> list:
    """[B, E] @ [E, C]: image features against class features (ViT-B/16's E and C), and the world's [B, E] @ [E, B]."""
    image, text = _randn(64, VITB16["embed"], seed=10), _randn(VITB16["classes"], VITB16["embed"], seed=11)
    world = _randn(WORLD["batch"], WORLD["embed"], seed=12)
    return [image @ text.T, world @ world.T]


def patch_embedding(shape: dict, batch: int) -> Callable[[], list]:
    """The patch embedding: a stride-`patch` convolution [B, 3, S, S] -> [B, D, S/p, S/p], forward and backward."""
    def item() -> list:
        import torch.nn.functional as F

        images = _randn(batch, 3, shape["image"], shape["image"], seed=13)
        weight = _randn(shape["width"], 3, shape["patch"], shape["patch"], seed=14, scale=0.02).requires_grad_()
        out = F.conv2d(images, weight, stride=shape["patch"])
        out.square().mean().backward()
        return [out, weight.grad]
    return item


def elementwise() -> list:
    """ATen's own kernels: softmax, layer norm, GELU (erf), cross entropy, each forward and backward."""
    import torch
    import torch.nn.functional as F

    x = _randn(WORLD["batch"], WORLD["tokens"], WORLD["width"], seed=15).requires_grad_()
    gain, bias = _randn(WORLD["width"], seed=16).requires_grad_(), _randn(WORLD["width"], seed=17).requires_grad_()
    outs = [x.softmax(-1), F.layer_norm(x, (WORLD["width"],), gain, bias), F.gelu(x)]
    logits = _randn(WORLD["batch"], WORLD["batch"], seed=18, scale=10.0).requires_grad_()
    outs.append(F.cross_entropy(logits, torch.arange(WORLD["batch"])))
    sum(o.square().mean() for o in outs).backward()
    return [*outs, x.grad, gain.grad, bias.grad, logits.grad]


def vector_math() -> list:
    """ATen's sqrt, exp, log and erf, which torch hands to MKL's vector math (VML): AdamW's denominator, the logit
    scale's exp. On an AMD CPU VML's own path gave other bytes than its Intel one (sqrt not even correctly rounded)."""
    x = _randn(1 << 14, seed=24).abs() + 1.0e-3
    return [x.sqrt(), x.exp(), x.log(), x.erf()]


def optimizer_steps() -> list:
    """Three steps of AdamW fused (pretraining), AdamW (the trainer's), SGD with momentum (CoOp's) on fixed gradients."""
    import torch

    out = []
    for make in (lambda p: torch.optim.AdamW(p, lr=1.0e-3, betas=(0.9, 0.98), eps=1.0e-6, weight_decay=0.1, fused=True),
                 lambda p: torch.optim.AdamW(p, lr=2.0e-3, weight_decay=5.0e-4),
                 lambda p: torch.optim.SGD(p, lr=2.0e-3, momentum=0.9, weight_decay=5.0e-4)):
        params = [_randn(512, 64, seed=19).requires_grad_(), _randn(64, seed=20).requires_grad_()]
        optimizer = make(params)
        for step in range(3):
            for index, param in enumerate(params):
                param.grad = _randn(*param.shape, seed=100 + 10 * step + index)
            optimizer.step()
        out += [p.detach() for p in params]
    return out


def _tiny_backbone():
    import open_clip
    import torch

    from dear.model.clip import create_model

    torch.manual_seed(0)
    return create_model("dear-world-tiny", None), open_clip.get_tokenizer("dear-world-tiny")


CAPTIONS = ["a red circle on a blue background", "a green square next to a tree", "a striped triangle",
            "a yellow rocket on a grey background", "a dotted apple", "a purple whale next to a square",
            "a camera on a striped background", "an orange cactus"]


def pretraining(threads: int, steps: int) -> Callable[[], list]:
    """`steps` contrastive steps of the tiny backbone as `dear backbone` runs them (fp32, the math attention, fused
    AdamW with the demo's lr and decay on the captions' token rows), on `threads` threads (the demo pretrains on
    backbone.threads: 2)."""
    def item() -> list:
        from types import SimpleNamespace

        import torch

        from dear.model import internals, pretrain

        before = torch.get_num_threads()
        torch.set_num_threads(threads)  # numpy's OpenBLAS (dear.compute.blas) stays on one, as in a job
        try:
            model, tokenizer = _tiny_backbone()
            pixels, tokens = _randn(len(CAPTIONS), 3, 32, 32, seed=21), tokenizer(CAPTIONS)
            with internals.compact_token_embedding(model, tokens.flatten()):
                optimizer = pretrain._optimizer(model.train(), SimpleNamespace(lr=1.0e-3, weight_decay=0.1))
                losses = [pretrain.contrastive_step(model, optimizer, pixels, tokens, "fp32") for _ in range(steps)]
        finally:
            torch.set_num_threads(before)
        return [torch.tensor(losses, dtype=torch.float64), *_state(model)]
    return item


def training(method: str) -> Callable[[], list]:
    """Two training steps of a method on the tiny backbone through the trainer (`step_of_batch`, `update`), its
    authors' recipe in fp32; returns the losses and the learned tensors."""
    def item() -> list:
        import torch

        from dear.compute import device as devices
        from dear.methods import create
        from dear.methods.recipe import resolve
        from dear.model.masks import HeadRole
        from dear.train.data import Schedule
        from dear.train.trainer import make_loop, step_of_batch, update

        model, tokenizer = _tiny_backbone()
        recipe = resolve({"all": {"precision": "fp32", "rep_dim": 16}}, method, "world_objects", "base_to_novel")
        roles = [HeadRole(2, head, *kind) for head, kind in
                 enumerate([("attribute", "color"), ("attribute", "object"), ("generalization", "other"), ("mixed", None)])]
        backbone = _Backbone(model, tokenizer)
        adapted = create(method, backbone, recipe, roles if method == "dear" else None, seed=1).train()
        precision = devices.Precision("fp32", torch.device("cpu"))
        loop = make_loop(adapted, recipe, Schedule(n=64, batch_size=4, epochs=1, seed=1), precision)
        images, labels = _randn(4, 3, 32, 32, seed=22), torch.tensor([0, 1, 2, 1])
        losses = []
        for _ in range(2):
            result = step_of_batch(adapted, images, labels, ["apple", "rocket", "whale"], precision)
            update(loop, result.total)
            losses.append(float(result.total.detach()))
        learned = [p.detach() for p in adapted.parameters() if p.requires_grad]
        return [torch.tensor(losses, dtype=torch.float64), *learned]
    return item


class _Backbone:
    """What `dear.methods.create` reads of a backbone: the model, its tokenizer, its card."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer, self.card = model, tokenizer, {"sha256": "fingerprint"}


def image_features() -> list:
    """The frozen model's image embedding of a batch, as fuse and evaluate compute features (no grad)."""
    import torch

    model, _ = _tiny_backbone()
    with torch.no_grad():
        return [model.eval().encode_image(_randn(16, 3, 32, 32, seed=23))]


def linear_probe() -> list:
    """The linear probe's C search and fit (scikit-learn's L-BFGS on numpy's OpenBLAS, float64), on 1 thread."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from dear.methods.linear_probe import search

    rng = np.random.default_rng(1)
    centers = rng.normal(size=(10, 32))
    labels = np.repeat(np.arange(10), 8)
    train = centers[labels] + rng.normal(scale=2.0, size=(80, 32))
    val = centers[labels[::2]] + rng.normal(scale=2.0, size=(40, 32))
    with threadpool_limits(1):
        found = search(train.astype(np.float32), labels, val.astype(np.float32), labels[::2], [1.0e2, 1.0, 1.0e-2],
                       1, 300)
    return [found.classifier.coef_, found.classifier.intercept_, np.array(found.tried)]


ITEMS: dict[str, Callable[[], list]] = {  # in the order they run: the first that moved is named
    "random inputs (torch, numpy)": random_inputs,
    "ViT-B/16 in-projection [B*T, D] @ [D, 3D]": qkv_projection(VITB16),
    "dear-world in-projection [B*T, D] @ [D, 3D]": qkv_projection(WORLD),
    "ViT-B/16 attention Q K^T, softmax V": attention_products(VITB16),
    "dear-world attention Q K^T, softmax V": attention_products(WORLD),
    "scaled_dot_product_attention (math, flash)": fused_attention,
    "class logits [B, E] @ [E, C]": class_logits,
    "ViT-B/16 patch embedding (stride-16 conv)": patch_embedding(VITB16, 2),
    "dear-world patch embedding (stride-8 conv)": patch_embedding(WORLD, 16),
    "softmax, layer norm, GELU, cross entropy": elementwise,
    "sqrt, exp, log, erf (MKL's vector math)": vector_math,
    "AdamW (fused), AdamW, SGD steps": optimizer_steps,
    "tiny backbone: 3 pretraining steps, 1 thread": pretraining(1, 3),
    "tiny backbone: a pretraining step, 2 threads": pretraining(2, 1),
    "CoOp: 2 training steps": training("coop"),
    "DeAR: 2 training steps": training("dear"),
    "image features (encode_image)": image_features,
    "linear probe: C search and fit (scikit-learn)": linear_probe,
}


# --- running, storing, comparing ---------------------------------------------------------

KERNELS = list(ITEMS)[: list(ITEMS).index("tiny backbone: 3 pretraining steps, 1 thread")]  # no model, no probe


def battery(names: list[str] | None = None) -> dict[str, str]:
    """{item: sha256} of every item (or of `names`), in order, on THREADS threads (the setting already applied)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(THREADS)
    with threadpool_limits(THREADS):
        return {name: digest(*compute()) for name, compute in ITEMS.items() if names is None or name in names}


def machine() -> dict:
    """The CPU and the builds that computed a fingerprint, and what was in force (dear.compute.reproducible.in_force)."""
    from dear.compute import reproducible

    return {"cpu": cpu_model(), "vendor": reproducible.cpu_vendor(), "python": platform.python_version(),
            "versions": versions(), "in_force": reproducible.in_force()}


def cpu_model() -> str:
    from dear.runtime.io import _cpu_name

    return _cpu_name()


def versions() -> dict[str, str]:
    """The builds whose math the fingerprint pins (the promise covers these only: constraints.txt)."""
    from importlib.metadata import version

    found = {name: version(name) for name in ("torch", "numpy", "scipy", "scikit-learn", "open_clip_torch")}
    import torch

    found["mkl"] = torch.backends.mkl.is_available() and _mkl_version() or "none"
    return found


def _mkl_version() -> str:
    import torch

    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library" in line:
            return line.split("Version", 1)[-1].split("-Product")[0].strip()
    return "unknown"


def compare(found: dict[str, str], stored: dict) -> str | None:
    """None when every item hashes as stored, else the report: this CPU, the caps, the builds, the first item moved."""
    expected = stored["items"]
    moved = [name for name in expected if found.get(name) != expected[name]]
    extra = [name for name in found if name not in expected]
    if not moved and not extra:
        return None
    here, there = machine(), stored["machine"]
    force = here["in_force"]
    lines = [f"compute.reproducible's fingerprint moved: {len(moved) + len(extra)} of {len(found)} items differ from "
             f"{STORED.name}",
             f"first item that moved: {(moved or extra)[0]}",
             f"this CPU: {here['cpu']} ({here['vendor']}; {' '.join(force.get('cpu_flags', []))})",
             f"caps in force: {json.dumps(force.get('caps', {}), sort_keys=True)}; MKL's branch: "
             f"{force.get('mkl_branch', 'unknown')}; ATen: {force.get('aten_capability')}",
             f"stored on: {there['cpu']} ({there['vendor']}), MKL's branch {there['in_force'].get('mkl_branch')}"]
    builds = {k: (there["versions"].get(k), v) for k, v in here["versions"].items() if there["versions"].get(k) != v}
    if builds:
        lines.append("other builds than the stored values' (the promise covers the pinned ones, constraints.txt): "
                     + ", ".join(f"{k} {a} → {b}" for k, (a, b) in builds.items()))
    lines.append("items moved: " + "; ".join(moved + extra))
    lines.append(f"a deliberate change of the math: rerun `{WRITE}` (and say on which CPU, docs/compute.md)")
    return "\n".join(lines)


def write(found: dict[str, str], path: Path = STORED) -> None:
    from dear.runtime.io import write_text

    record = {"items": found, "machine": machine(), "written_by": WRITE}
    write_text(path, json.dumps(record, indent=2) + "\n")


def prepare(cbwr: str | None, mkl_products: bool = False) -> None:
    """The setting's caps before torch and numpy load, as a `dear` job applies them; `cbwr` replaces MKL_CBWR,
    `mkl_products` leaves the matrix products on MKL (the setting without dear.compute.blas)."""
    from dear.compute import reproducible

    if "torch" in sys.modules or "numpy" in sys.modules:
        raise RuntimeError("dear.fingerprint must run in a fresh process: torch or numpy is already loaded")
    reproducible.apply(True)
    if cbwr is not None:
        os.environ.pop("MKL_CBWR", None) if cbwr == "none" else os.environ.__setitem__("MKL_CBWR", cbwr)
    import torch  # noqa: F401  (loads under the caps)

    reproducible.configure_torch(True)
    if mkl_products:
        from dear.compute import blas

        blas.remove()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dear.fingerprint", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"store this machine's values in {STORED}")
    parser.add_argument("--json", action="store_true", help="print the hashes and what was in force as JSON")
    parser.add_argument("--cbwr", help="MKL_CBWR instead of the setting's ('none': unset); never with --write")
    parser.add_argument("--mkl-products", action="store_true",
                        help="the matrix products on MKL, not on numpy's OpenBLAS (dear.compute.blas); never with --write")
    parser.add_argument("--kernels", action="store_true", help="the kernel items only (no model, no probe; with --json)")
    args = parser.parse_args(argv)
    if args.write and (args.cbwr or args.kernels or args.mkl_products):
        parser.error("--write stores the whole battery under the setting: drop --cbwr, --mkl-products and --kernels")
    if args.kernels and not args.json:
        parser.error("--kernels measures (with --json); the comparison covers every item")
    prepare(args.cbwr, args.mkl_products)
    found = battery(KERNELS if args.kernels else None)
    if args.json:
        print(json.dumps({"items": found, "machine": machine()}, indent=2))
        return 0
    if args.write:
        write(found)
        print(f"wrote {STORED} ({len(found)} items) on {cpu_model()}")
        return 0
    problem = compare(found, json.loads(STORED.read_text()))
    print(problem or f"the same bytes as {STORED.name}: {len(found)} items on {cpu_model()}")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
