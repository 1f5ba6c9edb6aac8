"""Building and loading CLIP models through open_clip's public API only.

The embedded architectures (`dear-world`, `dear-world-tiny`) are JSON configs
shipped in `dear/resources/`, registered with `open_clip.add_model_config`
when this module is imported, so `open_clip.create_model("dear-world")`
works like any of open_clip's own names. Real weights (`openai`,
`laion2b_...`) are read from open_clip's download cache, a local file where
it lies (`dear.model.weights`); nothing here downloads. Every failure a user
can cause is a one-line `DearError`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Callable

import torch

from dear.errors import DearError
from dear.runtime.io import load_torch, sha256_file
from dear.model import weights, without_transformers

with without_transformers():
    import open_clip

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
EMBEDDED_ARCHS = ("dear-world", "dear-world-tiny")
EMBEDDED = "embedded"

for _name in EMBEDDED_ARCHS:
    open_clip.add_model_config(RESOURCES / f"{_name}.json")


@contextlib.contextmanager
def _quiet(level: int = logging.WARNING):
    """open_clip logs every step of model creation on the root logger at INFO; keep stage logs readable."""
    root = logging.getLogger()
    previous = root.level
    root.setLevel(max(previous, level))
    try:
        yield
    finally:
        root.setLevel(previous)


@dataclasses.dataclass
class Backbone:
    """A ready-to-use CLIP: eval-mode model, its tokenizer, its card, its eval transform."""

    model: torch.nn.Module
    tokenizer: Callable[..., torch.Tensor]
    card: dict
    preprocess: Callable[[Any], torch.Tensor]


def resolve_arch(arch: str) -> str:
    """An open_clip model name; a path to a config JSON is registered under its stem."""
    if arch.endswith(".json"):
        path = Path(arch)
        if not path.is_file():
            raise DearError(f"{arch}: model config file not found; set model.arch to a model name or a config path")
        open_clip.add_model_config(path)
        arch = path.stem
    if open_clip.get_model_config(arch) is None:
        raise DearError(f"model.arch: unknown architecture '{arch}'; use one of {list(EMBEDDED_ARCHS)} or "
                        "an open_clip name (python -c 'import open_clip; print(open_clip.list_models())')")
    return arch


def model_config(arch: str) -> dict:
    return open_clip.get_model_config(resolve_arch(arch))


def create_model(arch: str, pretrained: str | None, cache_dir: str | None = None,
                 quick_gelu: bool = False) -> torch.nn.Module:
    """A CLIP of architecture `arch`: random (None / 'embedded'), a local weights file, or an open_clip tag.

    `quick_gelu` forces QuickGELU for random/file weights (a file of OpenAI weights needs it);
    for a tag the tag's own setting is used. A tag's file must already be in the cache
    (`dear fetch-weights`): nothing here downloads.
    """
    arch = resolve_arch(arch)
    if pretrained in (None, "", EMBEDDED):
        return _random(arch, quick_gelu)
    if not weights.is_weights_path(pretrained):
        quick_gelu = tag_quick_gelu(arch, pretrained)
    path = weights.resolve(arch, pretrained, cache_dir)
    model = _random(arch, quick_gelu)
    load_weights(model, path, arch)
    return model


def _random(arch: str, quick_gelu: bool = False) -> torch.nn.Module:
    """Random weights on purpose: silence open_clip's 'no pretrained weights' warning."""
    with _quiet(logging.ERROR):
        return open_clip.create_model(arch, pretrained=None, force_quick_gelu=quick_gelu)


def tag_quick_gelu(arch: str, tag: str) -> bool:
    """Whether open_clip's weights `tag` were trained with QuickGELU (OpenAI's were: open_clip issue 771)."""
    return bool(weights.tag_config(arch, tag).get("quick_gelu", False))


def load_weights(model: torch.nn.Module, path: str | Path, arch: str) -> None:
    """Load a state dict or open_clip checkpoint into `model`, checking every key and shape first."""
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: weights file not found; pass an existing file as model.pretrained")
    try:
        state = read_state_dict(path)
    except DearError:
        raise
    except Exception as err:  # torch.load raises many types on a corrupt or foreign file
        raise DearError(f"{path}: not a readable weights file ({type(err).__name__}); expected a state dict "
                        f"or open_clip checkpoint of {arch}") from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise DearError(f"{path}: does not hold a state dict of tensors; expected the weights of {arch}")
    state = _as_model_keys(model, state)
    problem = _mismatch(model.state_dict(), state)
    if problem:
        raise DearError(f"{path}: weights do not fit architecture {arch} ({problem}); pass weights made for {arch} "
                        "or set model.arch to their architecture")
    model.load_state_dict(state, strict=True)


def _as_model_keys(model: torch.nn.Module, state: dict) -> dict:
    """The small differences open_clip's own loader smooths over (open_clip.factory.load_checkpoint)."""
    state = dict(state)
    scale = state.get("logit_scale")
    if scale is not None and scale.ndim != model.logit_scale.ndim:
        state["logit_scale"] = scale.reshape(model.logit_scale.shape)
    if "text.transformer.embeddings.position_ids" not in model.state_dict():
        state.pop("text.transformer.embeddings.position_ids", None)
    return state


def read_state_dict(path: Path) -> dict:
    """A state dict from a .safetensors file, a state dict or an open_clip training checkpoint.

    open_clip's `load_state_dict` unwrapped the same layouts, but falls back
    to a `torch.load` without `weights_only` on a TypeError; ours never runs
    code from the file (`dear.runtime.io.load_torch`).
    """
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    checkpoint = load_torch(path)
    state = checkpoint["state_dict"] if isinstance(checkpoint, dict) and "state_dict" in checkpoint else checkpoint
    if isinstance(state, dict) and state and all(isinstance(k, str) and k.startswith("module.") for k in state):
        state = {key.removeprefix("module."): value for key, value in state.items()}  # saved from DataParallel
    return state


def _mismatch(expected: dict, given: dict) -> str:
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    shapes = [k for k in expected if k in given and tuple(expected[k].shape) != tuple(given[k].shape)]
    if not (missing or unexpected or shapes):
        return ""
    first = (shapes or missing or unexpected)[0]
    example = (f"'{first}' is {tuple(given[first].shape)}, expected {tuple(expected[first].shape)}" if shapes
               else f"e.g. '{first}'")
    return f"{len(missing)} missing, {len(unexpected)} unexpected, {len(shapes)} wrong-shape tensors; {example}"


def tokenizer(arch: str):
    """open_clip's tokenizer of `arch` (the standard SimpleTokenizer for CLIP configs)."""
    with _quiet():
        return open_clip.get_tokenizer(resolve_arch(arch))


def eval_transform(model: torch.nn.Module):
    """open_clip's evaluation transform (resize, centre crop, normalize) for `model`."""
    cfg = open_clip.get_model_preprocess_cfg(model)
    return open_clip.image_transform(cfg["size"], is_train=False, mean=cfg["mean"], std=cfg["std"],
                                     resize_mode=cfg.get("resize_mode"), interpolation=cfg.get("interpolation"))


def normalizer(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) [1, 3, 1, 1] of the model's image normalization."""
    cfg = open_clip.get_model_preprocess_cfg(model)
    return (torch.tensor(cfg["mean"]).view(1, 3, 1, 1), torch.tensor(cfg["std"]).view(1, 3, 1, 1))


def load_backbone(folder: str | Path) -> Backbone:
    """The backbone a `dear backbone` run recorded in `folder`: its card, and the weights file the card names.

    The weights are `folder/model.pt` (trained here) or the file the card
    records (real weights, used in place); their sha256 must still be the
    card's, so a file changed behind the pipeline's back is refused.
    """
    folder = Path(folder)
    card_path = folder / "card.json"
    if not card_path.is_file():
        raise DearError(f"{card_path}: backbone card not found; run `dear backbone` first")
    try:
        card = json.loads(card_path.read_text())
        arch = card["arch"]
    except (json.JSONDecodeError, KeyError) as err:
        raise DearError(f"{card_path}: not a backbone card ({type(err).__name__}); rerun `dear backbone`") from err
    if arch not in EMBEDDED_ARCHS and "model_config" in card and open_clip.get_model_config(arch) is None:
        _register(arch, card["model_config"])
    recorded = _recorded_weights(folder, card)
    key = (str(card_path.resolve()), _stamp(card_path), str(recorded.resolve()), _stamp(recorded))
    if key not in _loaded:
        _loaded.clear()
        _loaded[key] = _load(folder, card, arch)
    first = _loaded[key]
    return dataclasses.replace(first, model=copy.deepcopy(first.model), card=copy.deepcopy(first.card))


def _load(folder: Path, card: dict, arch: str) -> Backbone:
    model = _random(arch, bool(card.get("model_config", {}).get("quick_gelu", False)))
    load_weights(model, weights_file(folder, card), arch)
    model.eval()
    return Backbone(model=model, tokenizer=tokenizer(arch), card=card, preprocess=eval_transform(model))


# The backbone last loaded, by its card's and weights file's identity. `dear <stage>` runs every seed of a job
# in one process and each seed loads the same backbone: later loads copy the first one's model (~10 ms, not
# ~0.3 s of building, reading and hashing), and a file changed in between is read (and checked) again.
_loaded: dict[tuple, Backbone] = {}


def _stamp(path: Path) -> tuple | None:
    try:
        stat = path.stat()
    except OSError:
        return None  # missing: weights_file names it
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def weights_file(folder: Path, card: dict) -> Path:
    """The weights file a card names (relative to its folder, or absolute), checked against the card's sha256."""
    path = _recorded_weights(folder, card)
    if not path.is_file():
        hint = "rerun `dear backbone`" if path.parent == folder else "restore it or rerun `dear backbone`"
        raise DearError(f"{path}: the backbone's weights file is missing ({folder / 'card.json'} names it); {hint}")
    expected = card.get("sha256")
    if expected and sha256_file(path) != expected:
        raise DearError(f"{path}: sha256 differs from the one {folder / 'card.json'} recorded ({expected[:12]}...): "
                        "the weights changed since `dear backbone`; restore them or rerun `dear backbone`")
    return path


def _recorded_weights(folder: Path, card: dict) -> Path:
    """The path of the weights a card names (an absolute one replaces the folder); not checked."""
    return folder / card.get("weights", {}).get("path", "model.pt")


def _register(arch: str, config: dict) -> None:
    """Register a config recorded in a card (an arch from a config file that is gone)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="dear-arch-"))
    (folder / f"{arch}.json").write_text(json.dumps(config))
    open_clip.add_model_config(folder / f"{arch}.json")
