"""What every method's model is: a frozen CLIP, the method's learnable parts, and one interface.

The trainer, `fuse` and `evaluate` only talk to this interface, so a method
is one module: its learnable parts (`build`), how they change the towers
(`encode`, `compute_text_features`, through `dear.methods.towers`), its loss terms (`step`)
and its inference (`output`); `for_dataset` lets a method read a value of the
scored dataset's recipe at evaluation (MMRL++). The shared parts live here:
- the frozen image prefix: image blocks below the first one that reads a
  learnable tensor are computed without autograd (and cached by the trainer's
  view bank and by `evaluate` between seeds);
- text features computed once per class list and prompt when nothing learns;
- the untouched model's CLS feature, for losses that compare with it;
- the learnable state that model.pt stores, and the run's seed for the init.
Hooks a method may need besides those (each with a default that changes nothing):
`init_passes`/`init_from_passes` (state built from augmented passes over the
shots before the first step: Tip-Adapter-F's cache), `searches_validation`/
`search_validation` (a choice made on the validation shots after training:
Tip-Adapter-F's alpha and beta), `fits_features`/`fit` (no steps at all: the
linear probe). The trainer's own behaviours a recipe may ask for are read from
keys only those recipes have (`dear.train.trainer`: `iterations_per_shot`,
`schedule: cosine_steps` with `min_lr`, `drop_last`, `adam_eps`).
Shapes: B images, C classes, S attribute/representation streams (stream 0 is
CLS), E embedding width, D tower width.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods.recipe import Recipe
from dear.model import internals as oc


_BUILDING: ContextVar[str | None] = ContextVar("dear_method_building", default=None)  # the method whose build runs


@dataclass
class Step:
    """One training step's loss: the total, each term (logged as loss_<term>), and the logits accuracy counts."""

    total: torch.Tensor
    terms: dict[str, torch.Tensor]
    logits: torch.Tensor  # [B, C]


class MethodModel(nn.Module):
    """CLIP plus one method's learnable parts. Subclasses override `build`, and what their method changes."""

    TERMS: ClassVar[tuple[str, ...]] = ()  # the loss terms `step` returns, besides the total
    needs_frozen_image: ClassVar[bool] = False  # `step` reads the untouched model's image feature
    refits_fusion: ClassVar[bool] = False  # `fuse` may refit the fusion weights (DeAR)
    fits_features: ClassVar[bool] = False  # `dear train` calls `fit` on the shots' frozen features (linear probe)
    searches_validation: ClassVar[bool] = False  # `dear train` calls `search_validation` after training (Tip-Adapter-F)

    def __init__(self, name: str, clip: nn.Module, tokenizer, recipe: Recipe, roles=None, seed: int = 0):
        super().__init__()
        self.name, self.tokenizer, self.recipe = name, tokenizer, recipe
        self.clip = clip.eval().requires_grad_(False)
        self.vision, self.text = oc.vision_tower(clip), oc.text_tower(clip)
        self.fade = 1.0  # the tokens' fade-in weight (token methods; 1 = off), saved with the learnable state
        self._cache: dict = {}
        building = _BUILDING.set(recipe.recipe)  # check_layer names the key under train.recipes.<recipe file>
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.build(roles)
        finally:
            _BUILDING.reset(building)

    def build(self, roles) -> None:
        """Create the learnable parts (under the run's seed: the same init on every run)."""

    # --- image side ------------------------------------------------------------------

    @property
    def frozen_depth(self) -> int:
        """Image blocks that never read a learnable tensor (all of them unless the method adds image tokens)."""
        return self.vision.layers

    @torch.no_grad()
    def image_prefix(self, images: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] -> [B, 1+N, D]: the output of the frozen blocks (the same for every step's parameters)."""
        x = oc.image_tokens(self.clip, images)
        for block in self.vision.blocks[: self.frozen_depth]:
            x = oc.block_forward(block, x)
        return x

    def zero_effect(self) -> bool:
        """Set every learnable tensor to a value that leaves zero-shot CLIP's features as they are, and say True;
        False (the default): the method has no such values. The testing kit then checks the features are CLIP's."""
        return False

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """Stream features [B, S+1, E], normalized, from the frozen prefix (stream 0: CLS)."""
        return self.frozen_image(prefix)[:, None]

    @torch.no_grad()
    def frozen_image(self, prefix: torch.Tensor) -> torch.Tensor:
        """The untouched model's normalized CLS feature [B, E] from the frozen prefix [B, 1+N, D]."""
        return F.normalize(self.frozen_embedding(prefix), dim=-1)

    @torch.no_grad()
    def frozen_embedding(self, prefix: torch.Tensor) -> torch.Tensor:
        """The untouched model's image embedding [B, E], unnormalized (encode_image), from the frozen prefix."""
        x = prefix
        blocks = self.vision.blocks[self.frozen_depth:]
        cls = torch.zeros(1, dtype=torch.long, device=x.device)
        for i, block in enumerate(blocks):
            x = oc.block_forward(block, x, rows=cls if i == len(blocks) - 1 else None)  # last: [B, 1, D]
        return oc.image_embedding(self.clip, x[:, 0])

    # --- text side -------------------------------------------------------------------

    def text_features(self, classnames: list[str], template: str | None = None) -> torch.Tensor:
        """[C, E] normalized class features; without autograd, cached per class list and prompt."""
        template = template or self.recipe.get("template")
        if torch.is_grad_enabled():
            return self.compute_text_features(list(classnames), template)
        key = ("text", tuple(classnames), template, str(self.device), self.fade, self.training,  # dropout: CLIP-LoRA
               tuple(p._version for p in self.parameters() if p.requires_grad))
        if key not in self._cache:
            self._cache = {k: v for k, v in self._cache.items() if k[0] != "text"}
            self._cache[key] = self.compute_text_features(list(classnames), template)
        return self._cache[key]

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        """The hook behind `text_features`: [C, E] normalized features of the class names (every method writes it).

        `template` is the recipe's prompt (or the dataset's own); called with autograd on while training and
        once per class list and parameter version otherwise.
        """
        raise NotImplementedError(f"{type(self).__name__} must say how it writes its class features")

    def once(self, key: tuple, compute):
        """`compute()` the first time `key` is asked for on this device, then the cached result (frozen things)."""
        key = (*key, str(self.device))
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    # --- logits and inference -----------------------------------------------------------

    def logit_scale(self) -> torch.Tensor:
        """CLIP's temperature exp(logit_scale), or the recipe's fixed value (MMRL: 100)."""
        fixed = self.recipe.get("logit_scale")
        return torch.tensor(fixed, device=self.device) if fixed is not None else oc.logit_scale(self.clip)

    def logits(self, features: torch.Tensor, classnames: list[str], template: str | None = None) -> torch.Tensor:
        """[B, S+1, E] stream features x the class list's text features -> [B, S+1, C]."""
        text = self.text_features(classnames, template)
        return self.logit_scale().float() * torch.einsum("bke,ce->bkc", features.float(), text.float())

    def can_score(self, classnames: list[str]) -> bool:
        """Whether the method has logits for this class list (a prompt writes any; a linear probe only its own)."""
        return True

    def stream_names(self) -> list[str]:
        return ["cls"]

    @property
    def alpha(self) -> torch.Tensor:
        """Fusion weights over the streams [S+1] (one stream: [1])."""
        return torch.ones(1, device=self.device)

    def output(self, logits: torch.Tensor, alpha: torch.Tensor, seen: bool, novel: str) -> torch.Tensor:
        """The method's prediction logits [N, C] from stream logits [N, S+1, C].

        `seen`: base classes or the transfer source itself; `novel`: fusion.novel (cls | fused) for unseen ones.
        """
        return logits[:, 0]

    # --- training --------------------------------------------------------------------

    def step(self, prefix: torch.Tensor, labels: torch.Tensor, classnames: list[str],
             frozen_image: torch.Tensor | None = None) -> Step:
        """The loss of one batch from its frozen prefix [B, 1+N, D].

        frozen_image: the untouched model's CLS feature [B, E] (`frozen_image(prefix)`), a cache the trainer may
        hand over; a method whose loss reads it computes it itself when it is not given.
        """
        raise DearError(f"method {self.name} has nothing to train")

    def half_parameters(self) -> list[nn.Parameter]:
        """The learnable tensors a PREC fp16 run holds in half: all of them, unless the authors' code leaves some in
        fp32 (MaPLe's deep prompts and their couplings)."""
        return [p for p in self.parameters() if p.requires_grad]

    @property
    def trains(self) -> bool:
        return any(p.requires_grad for p in self.parameters())

    def on_epoch_end(self, epoch: int, epochs: int) -> None:
        """Called by the trainer after each epoch's last step (PromptSRC's prompt averaging)."""

    def init_passes(self) -> int:
        """Augmented passes over the training shots that `init_from_passes` reads before the optimizer is made
        (Tip-Adapter-F's cache: its augment epochs); 0, every other method's: none."""
        return 0

    def init_from_passes(self, passes) -> None:
        """Build what the passes decide, from batches (pass, frozen prefix [B, 1+N, D], labels [B]) of the shots in
        their order. The trainer calls it on every start, a resumed one too, before the checkpoint is loaded, so
        that learnable tensors made here exist (in their shapes) when the optimizer and the checkpoint need them."""

    def search_validation(self, features: torch.Tensor, labels: list[int], classnames: list[str]) -> dict:
        """With `searches_validation`: choose what the method chooses on the validation shots after training, from
        their features [N, 1, E] (`encode` of the test transform); returns what `dear train` logs."""
        raise NotImplementedError(f"{type(self).__name__} sets searches_validation but has no search_validation")

    def for_dataset(self, recipe: Recipe) -> None:
        """Called by `dear evaluate` before it scores a dataset, with this method's recipe resolved at that dataset in
        the run's protocol (the model's own recipe for the dataset it was trained on).

        The authors' test scripts build the model under the scored dataset's config and load the trained tensors into
        it: a method whose forward reads a value of that config takes it here (MMRL++'s BETA per cross-dataset
        target), and calls `forget_text` when its text features change. Default: nothing (every other method scores
        each dataset with its own recipe's values; the prompt template is handled apart, by `evaluate`).
        """

    def forget_text(self) -> None:
        """Drop the cached class features: the next `text_features` computes them again (after `for_dataset`)."""
        self._cache = {k: v for k, v in self._cache.items() if k[0] != "text"}

    # --- state -------------------------------------------------------------------------

    def train(self, mode: bool = True) -> "MethodModel":
        super().train(mode)
        self.clip.eval()  # the frozen model never switches to training behaviour
        return self

    def _apply(self, fn, *args, **kwargs):
        self._cache = {}
        return super()._apply(fn, *args, **kwargs)

    @property
    def device(self) -> torch.device:
        return oc.text_positions(self.clip).device

    def extra_state(self) -> dict[str, torch.Tensor]:
        """Non-parameter state model.pt keeps besides the learnable tensors (the fade-in weight, averages)."""
        return {}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what `extra_state` saved (keys absent from older files keep their defaults)."""

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The learnable tensors and the extra state (what model.pt stores), on CPU."""
        state = {name: p.detach().cpu().clone() for name, p in self.named_parameters() if p.requires_grad}
        return {**state, **{k: v.detach().cpu().clone() for k, v in self.extra_state().items()}}

    def load_trainable(self, state: dict[str, torch.Tensor], source: str) -> None:
        state = dict(state)
        extra = {key: state.pop(key) for key in list(state) if key in self.extra_state()}
        own = {name: p for name, p in self.named_parameters() if p.requires_grad}
        if set(own) != set(state) or any(own[k].shape != state[k].shape for k in own):
            raise DearError(f"{source}: learnable tensors do not match method {self.name} on this backbone; "
                            "retrain with `dear train`")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(value)
        self.load_extra_state(extra)


def in_precision(model: MethodModel, precision) -> MethodModel:
    """`model` (a method's, on its device) in `precision` (a `dear.compute.device.Precision`): for fp16, CLIP and
    the learnable tensors in half (`MethodModel.half_parameters`: those the authors' code holds in half)."""
    if precision.half:
        oc.half_precision(model.clip)
        for param in model.half_parameters():
            param.data = param.data.half()
    return model


class LayerError(DearError):
    """A recipe value naming a layer outside the tower: the key and the tower's depth travel with the line (the
    testing kit names the key to set for its two-layer backbone)."""

    def __init__(self, message: str, key: str, layers: int):
        super().__init__(message)
        self.key, self.layers = key, layers


def check_layer(layer: int, layers: int, key: str, method: str | None = None, nullable: bool = False) -> int:
    """A 1-based layer of a tower with `layers` blocks, or a one-line error naming the recipe key.

    `method`: whose recipe it is (default: the method whose `build` is running); `nullable`: the key takes null
    (a default from the tower's depth), so the error offers it.
    """
    if not 1 <= layer <= layers:
        method = method or _BUILDING.get()
        key_path = f"train.recipes.{method}.{key}" if method else key
        raise LayerError(f"recipe: {key} = {layer} is outside this backbone's layers 1..{layers}; set {key_path} "
                         f"in 1..{layers}" + (", or null for its default" if nullable else ""), key, layers)
    return layer


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """CE in fp32 whatever the logits' precision."""
    return F.cross_entropy(logits.float(), labels)
