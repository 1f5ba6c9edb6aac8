"""Stage `backbone`: the CLIP every later stage adapts, described by `card.json`.

`model.pretrained: embedded` trains `model.arch` contrastively on the world's
in-memory corpus (fixed step count, deterministic on CPU for a seed and thread
count; on `compute.device`) and writes `model.pt` next to the card. Real
weights (a file, or an open_clip tag already in the cache) are loaded and
hashed where they lie, never copied: the card records their path and sha256,
and every later stage loads that file and checks that hash
(`dear.model.clip.load_backbone`). With `backbone.sanity.enabled` (auto: for
the embedded backbone only) the card also holds zero-shot top-1 on every
world test set next to chance.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from pathlib import Path
from typing import ClassVar

import torch

from dear.compute import device as devices
from dear.data import world as world_data
from dear.data.manifest import check_images_exist
from dear.errors import DearError
from dear.runtime.io import output_folder, provenance, read_json, sha256_file, sha256_json, versions, write_bytes, write_json
from dear.model import clip, weights
from dear.model.pretrain import pretrain
from dear.model.sanity import world_zero_shot
from dear.config.params import Params, in_use, sanity_on

log = logging.getLogger("dear.backbone")


@dataclasses.dataclass(frozen=True)
class Inputs:
    world: Path


@dataclasses.dataclass(frozen=True)
class Outputs:
    folder: Path
    FILES: ClassVar[tuple[str, ...]] = ("model.pt", "card.json")


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    checked = sanity_on(params)
    world_card = _check_world(params, Path(inputs.world)) if checked else None
    arch = clip.resolve_arch(params.model.arch)
    config = dict(clip.model_config(arch))
    if params.model.pretrained != clip.EMBEDDED and not weights.is_weights_path(params.model.pretrained):
        config["quick_gelu"] = clip.tag_quick_gelu(arch, params.model.pretrained) or config.get("quick_gelu", False)
    torch.set_num_threads(params.backbone.threads)
    device = devices.resolve(params.compute)
    devices.fast_matmuls(device)
    model, training, weights_path = _make_model(params, arch, config, device)
    sanity = None
    if checked:
        sanity = world_zero_shot(model, clip.tokenizer(arch), clip.eval_transform(model), Path(inputs.world),
                                 world_card, params.backbone.eval_batch_size, params.backbone.sanity.max_images_per_set,
                                 params.world.seed, params.compute.precision)
    else:
        log.info("zero-shot sanity check on the world off (backbone.sanity.enabled: %s)",
                 "auto, and these are not the embedded backbone's weights" if params.backbone.sanity.enabled == "auto"
                 else "false")
    with output_folder(outputs.folder, Outputs.FILES) as folder:  # real weights: no model.pt of an earlier run stays
        if weights_path is None:  # trained here: the weights live in the backbone folder
            write_bytes(folder / "model.pt", state_dict_bytes(model))
            recorded, sha = "model.pt", sha256_file(folder / "model.pt")
        else:  # real weights: used where they lie, hashed, never copied
            recorded, sha = str(weights_path), sha256_file(weights_path)
        write_json(folder / "card.json", {
            "arch": arch,
            "model_config": config,
            "source": _source(params.model.pretrained),
            "pretrained": params.model.pretrained,
            "weights": {"path": recorded, "sha256": sha, "copied_here": weights_path is None},
            "sha256": sha,
            "parameters": sum(p.numel() for p in model.parameters()),
            "versions": {key: value for key, value in versions().items() if key in ("torch", "open_clip_torch", "dear")},
            "device": str(device),
            "training": training,
            "sanity": sanity,
            "provenance": provenance({"model": params.model, "backbone": params.backbone, "world": params.world},
                                     inputs=_world_input(inputs, checked), seed=params.backbone.seed),
        })
    log.info("backbone %s: weights %s (sha256 %s...)", arch, recorded, sha[:12])


def _world_input(inputs: Inputs, sanity_on: bool) -> dict:
    return {"world_card": Path(inputs.world) / "card.json"} if sanity_on else {}


def _check_world(params: Params, folder: Path) -> dict:
    """The world card, checked to match params.world (the corpus is drawn from those params)."""
    if not (folder / "card.json").is_file():
        why = "auto: the embedded backbone" if params.backbone.sanity.enabled == "auto" else "true"
        raise DearError(f"{folder / 'card.json'}: not found; the backbone's zero-shot sanity check scores it on the "
                        f"embedded world (backbone.sanity.enabled: {why}): run `dear world` first (--world), or set "
                        "backbone.sanity.enabled: false")
    card = read_json(folder / "card.json")
    expected = sha256_json(params.world.model_dump(mode="json"))
    if card.get("world_params_sha256") != expected:
        raise DearError(f"{folder / 'card.json'}: world was drawn with other world params than "
                        f"{in_use()}'s; rerun `dear world`")
    for name in card.get("datasets", {}):  # the sanity evaluation reads them after training: check now
        split_file = folder / name / f"split_zhou_{name}.json"
        check_images_exist([folder / name / "images" / item[0] for item in read_json(split_file)["test"]],
                           split_file, "world test image")
    return card


def _make_model(params: Params, arch: str, config: dict,
                device: torch.device) -> tuple[torch.nn.Module, dict, Path | None]:
    """(model on `device`, training facts, weights file used in place or None when trained here)."""
    pretrained = params.model.pretrained
    if pretrained != clip.EMBEDDED:
        path = weights.resolve(arch, pretrained, params.model.cache_dir)
        model = clip.create_model(arch, pretrained, params.model.cache_dir)
        return model.eval().to(device), {"trained_here": False}, path
    image_size = config["vision_cfg"]["image_size"]
    if image_size != params.world.image_size:
        raise DearError(f"{in_use()}: model.arch {arch} takes {image_size} px images but world.image_size is "
                        f"{params.world.image_size}; make them equal")
    world_data.check(params.world)
    excluded = world_data.test_scene_keys(params.world)
    torch.manual_seed(params.backbone.seed)
    model = clip.create_model(arch, None).to(device)
    precision = params.backbone.precision if device.type == "cpu" else params.compute.precision
    log.info("pretraining on %s", devices.describe(device, precision, cpu_autocast=True))  # backbone.precision
    history = pretrain(model, clip.tokenizer(arch), params.world, params.backbone, excluded, precision=precision)
    return model, {"trained_here": True, "steps": params.backbone.steps, "batch_size": params.backbone.batch_size,
                   "pairs_seen": params.backbone.steps * params.backbone.batch_size, "precision": precision,
                   "final_loss": history[-1]["loss"], "loss_log": history,
                   "excluded_test_scenes": len(excluded)}, None


def _source(pretrained: str) -> str:
    if pretrained == clip.EMBEDDED:
        return "embedded: trained by `dear backbone` on the emoji world corpus"
    if weights.is_weights_path(pretrained):
        return f"file: {pretrained}"
    return f"open_clip: {pretrained}"


def state_dict_bytes(model: torch.nn.Module) -> bytes:
    """The state dict's bytes, from CPU tensors (moves `model` to the CPU: a GPU-trained one saves like one trained here)."""
    buffer = io.BytesIO()
    torch.save(model.to("cpu").state_dict(), buffer)
    return buffer.getvalue()
