"""Where the model stages run: the one reading of the `compute` section.

backbone, profile, train, fuse and evaluate all call `resolve` and
`autocast`, so `compute.device: auto` means the same thing everywhere:
CUDA when torch sees a device, else the CPU. On CPU nothing is autocast
(results are bit-reproducible there); on CUDA `compute.precision: bf16`
autocasts the forward passes of the stages that allow it. `dear check`
answers "is a CUDA device there?" without importing torch (`dear.compute.probe`).
"""

from __future__ import annotations

import contextlib

import torch

from dear.errors import DearError


def resolve(compute) -> torch.device:
    """The device of `compute.device`; `cuda` without a visible device is an error, `auto` falls back to CPU."""
    available = torch.cuda.is_available()
    if compute.device == "cuda" and not available:
        raise DearError("compute.device: cuda requested but torch sees no CUDA device (torch "
                        f"{torch.__version__}, CUDA build {torch.version.cuda}); use auto or cpu, or run on a GPU node")
    if compute.device == "cpu" or not available:
        return torch.device("cpu")
    return torch.device("cuda")


def autocast(device: torch.device, precision: str):
    """bf16 autocast on CUDA when `precision` is bf16; nothing on CPU."""
    if device.type == "cuda" and precision == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def uses_bf16(device: torch.device, precision: str) -> bool:
    return device.type == "cuda" and precision == "bf16"


def fast_matmuls(device: torch.device) -> None:
    """TF32 for fp32 matmuls and convolutions left outside autocast (train, fuse, evaluate, backbone) on CUDA."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def exact_matmuls(device: torch.device) -> None:
    """Full fp32 on CUDA (profile: the head terms must add up to the embedding to float tolerance)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def describe(device: torch.device, precision: str, cpu_autocast: bool = False) -> str:
    """One log line's worth: which device, which precision (`cpu_autocast`: the stage autocasts on CPU too)."""
    mode = "bf16 autocast" if precision == "bf16" else "fp32"
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)}), {mode}"
    return f"cpu, {mode if cpu_autocast else 'fp32'}, {torch.get_num_threads()} threads"


class Precision:
    """A method recipe's `precision` on one device, as its authors' trainers run it.

    On CUDA: fp16 casts the frozen CLIP (OpenAI's `convert_weights`: linear,
    convolution, attention weights and projections; norms compute in fp32) and
    the learnable tensors to half and trains them so (CoOp's PREC fp16); amp
    keeps fp32 weights under fp16 autocast with loss scaling (MMRL's PREC amp;
    its evaluation runs without autocast); bf16 autocasts to bf16 (ours); fp32
    is plain. On CPU every precision runs fp32: results are bit-reproducible there.
    """

    def __init__(self, name: str, device: torch.device):
        self.name, self.device = name, device
        self.active = device.type == "cuda" and name != "fp32"

    @property
    def half(self) -> bool:
        return self.active and self.name == "fp16"

    @property
    def scales_loss(self) -> bool:
        return self.active and self.name == "amp"

    def autocast(self, training: bool = True):
        """The autocast of a forward pass (amp: training only, as MMRL's test runs in fp32)."""
        if self.active and self.name == "bf16":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if self.active and self.name == "amp" and training:
            return torch.autocast("cuda", dtype=torch.float16)
        return contextlib.nullcontext()

    def describe(self) -> str:
        return self.name if self.active else "fp32"
