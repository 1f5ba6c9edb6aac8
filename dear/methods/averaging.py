"""Weight averaging over epochs: a trainer hook, used by PromptSRC's Gaussian prompt aggregation (GPA).

After epoch e of E the learnable tensors are added to a running sum with
weight w_e; after the last epoch the sum replaces them, so the model that is
saved and evaluated is sum_e w_e theta_e (muzairkhattak/PromptSRC
trainers/promptsrc.py: `state_dict_weighting` and `state_dict_add` at the
last batch of every epoch, the sum loaded after the last one). The trainer
reaches it through `MethodModel.on_epoch_end`; the running sum is part of
the model's `extra_state`, so it travels in every checkpoint and a resumed
run ends with the same bytes as one that never stopped.

The authors average the whole state dict, frozen CLIP weights included:
sum_e w_e W = W for a frozen W (the weights sum to 1), up to the rounding of
fp16 products, so only the learnable tensors are averaged here. Each product
w_e theta_e and each sum is computed in the tensor's own dtype, as theirs.
"""

from __future__ import annotations

import torch

from dear.errors import DearError


def gaussian_weights(epochs: int, mean: float, std: float) -> list[float]:
    """w_e = N(e; mean, std) / sum_e' N(e'; mean, std) for e = 1..epochs (PromptSRC's `get_gauss`, normalized).

    Computed as a softmax of the log-density: the same numbers, and no 0/0 when every density underflows.
    """
    if epochs < 1 or not std > 0:
        raise DearError(f"recipe: Gaussian epoch weights need epochs >= 1 and a positive std (got {epochs}, {std})")
    e = torch.arange(1, epochs + 1, dtype=torch.float64)
    log_density = torch.distributions.Normal(torch.tensor(float(mean), dtype=torch.float64),
                                             torch.tensor(float(std), dtype=torch.float64)).log_prob(e)
    return log_density.softmax(0).tolist()


class EpochAverage:
    """The running sum sum_e w_e theta_e of named tensors; `update` after each epoch, the sum loaded after the last."""

    def __init__(self, weights: list[float], tensors: dict[str, torch.Tensor]):
        self.weights = list(weights)
        self.sums = {name: torch.zeros_like(t, device="cpu") for name, t in tensors.items()}

    @torch.no_grad()
    def update(self, epoch: int, epochs: int, tensors: dict[str, torch.Tensor]) -> None:
        """Add w_epoch x each tensor (epoch 1-based of `epochs`); after the last epoch the sums replace the tensors."""
        if epochs != len(self.weights) or not 1 <= epoch <= epochs:
            raise DearError(f"epoch averaging: epoch {epoch} of {epochs}, but the weights are for "
                            f"{len(self.weights)} epochs; the recipe's epochs and the trainer's disagree")
        weight = self.weights[epoch - 1]
        for name, tensor in tensors.items():
            self.sums[name] = self.sums[name].to(tensor.device, tensor.dtype) + weight * tensor.detach()
            if epoch == len(self.weights):
                tensor.copy_(self.sums[name])

    def state(self, prefix: str) -> dict[str, torch.Tensor]:
        return {prefix + name: total for name, total in self.sums.items()}

    def load_state(self, state: dict[str, torch.Tensor], prefix: str) -> None:
        for name in self.sums:
            if prefix + name in state:
                self.sums[name] = state[prefix + name].clone()
