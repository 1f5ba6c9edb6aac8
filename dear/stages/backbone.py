"""Stage `backbone`: the CLIP every later stage adapts, with a card of sanity metrics.

`model.pretrained: embedded` trains `model.arch` contrastively on the world's
in-memory corpus (fixed step count, deterministic on CPU for a seed and thread
count); anything else loads real weights through open_clip. Either way the
card records the architecture, the weights' sha256 and zero-shot top-1 on
every world test set next to chance.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from pathlib import Path

import torch
from PIL import Image

from dear.data import world as world_data
from dear.errors import DearError
from dear.io import provenance, read_json, sha256_file, sha256_json, versions, write_bytes, write_json
from dear.model import clip
from dear.model.pretrain import pretrain
from dear.model.zeroshot import ZeroShotClassifier
from dear.params import Params

log = logging.getLogger("dear.backbone")


@dataclasses.dataclass(frozen=True)
class Inputs:
    world: Path


@dataclasses.dataclass(frozen=True)
class Outputs:
    folder: Path


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    world_card = _check_world(params, Path(inputs.world))
    arch = clip.resolve_arch(params.model.arch)
    config = dict(clip.model_config(arch))
    if params.model.pretrained != clip.EMBEDDED and not clip.is_weights_path(params.model.pretrained):
        config["quick_gelu"] = clip.tag_quick_gelu(arch, params.model.pretrained) or config.get("quick_gelu", False)
    torch.set_num_threads(params.backbone.threads)
    model, training = _make_model(params, arch, config)
    tokenizer = clip.tokenizer(arch)
    sanity = sanity_metrics(model, tokenizer, clip.eval_transform(model), Path(inputs.world), world_card,
                            params.backbone.eval_batch_size)
    folder = Path(outputs.folder)
    write_bytes(folder / "model.pt", state_dict_bytes(model))
    card = {
        "arch": arch,
        "model_config": config,
        "source": _source(params.model.pretrained),
        "pretrained": params.model.pretrained,
        "sha256": sha256_file(folder / "model.pt"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "versions": {key: value for key, value in versions().items() if key in ("torch", "open_clip_torch", "dear")},
        "training": training,
        "sanity": sanity,
        "provenance": provenance({"model": params.model, "backbone": params.backbone, "world": params.world},
                                 inputs={"world_card": Path(inputs.world) / "card.json"}, seed=params.backbone.seed),
    }
    write_json(folder / "card.json", card)
    for name, entry in sanity.items():
        log.info("zero-shot %s: %.1f%% (chance %.1f%%)", name, 100 * entry["top1"], 100 * entry["chance"])


def _check_world(params: Params, folder: Path) -> dict:
    """The world card, checked to match params.world (the corpus is drawn from those params)."""
    card = read_json(folder / "card.json")
    expected = sha256_json(params.world.model_dump(mode="json"))
    if card.get("world_params_sha256") != expected:
        raise DearError(f"{folder / 'card.json'}: world was drawn with other world params than "
                        "params.yaml's; rerun `dear world`")
    return card


def _make_model(params: Params, arch: str, config: dict) -> tuple[torch.nn.Module, dict]:
    pretrained = params.model.pretrained
    if pretrained != clip.EMBEDDED:
        model = clip.create_model(arch, pretrained, params.model.cache_dir)
        return model.eval(), {"trained_here": False}
    image_size = config["vision_cfg"]["image_size"]
    if image_size != params.world.image_size:
        raise DearError(f"params.yaml: model.arch {arch} takes {image_size} px images but world.image_size is "
                        f"{params.world.image_size}; make them equal")
    world_data.check(params.world)
    excluded = world_data.test_scene_keys(params.world)
    torch.manual_seed(params.backbone.seed)
    model = clip.create_model(arch, None)
    history = pretrain(model, clip.tokenizer(arch), params.world, params.backbone, excluded)
    return model, {"trained_here": True, "steps": params.backbone.steps, "batch_size": params.backbone.batch_size,
                   "pairs_seen": params.backbone.steps * params.backbone.batch_size,
                   "final_loss": history[-1]["loss"], "loss_log": history,
                   "excluded_test_scenes": len(excluded)}


def _source(pretrained: str) -> str:
    if pretrained == clip.EMBEDDED:
        return "embedded: trained by `dear backbone` on the emoji world corpus"
    if clip.is_weights_path(pretrained):
        return f"file: {pretrained}"
    return f"open_clip: {pretrained}"


def state_dict_bytes(model: torch.nn.Module) -> bytes:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


@torch.no_grad()
def sanity_metrics(model, tokenizer, preprocess, world: Path, world_card: dict, batch_size: int) -> dict:
    """Zero-shot top-1 on every world test set (world_objects also by base/novel half), with chance."""
    results = {}
    for name, entry in world_card["datasets"].items():
        split = read_json(world / name / f"split_zhou_{name}.json")["test"]
        pixels = torch.stack([preprocess(Image.open(world / name / "images" / impath).convert("RGB"))
                              for impath, _, _ in split])                                  # [N, 3, H, W]
        labels = torch.tensor([label for _, label, _ in split])
        classifier = ZeroShotClassifier(model, tokenizer, entry["classnames"], entry["templates"])
        logits = classifier.logits(pixels, batch_size)                                     # [N, C]
        correct = logits.argmax(-1) == labels
        n = len(entry["classnames"])
        results[name] = {"top1": float(correct.float().mean()), "chance": 1.0 / n, "classes": n,
                         "images": len(split), "templates": entry["templates"]}
        if name == "world_objects":
            results[name].update(_base_novel(logits, labels))
    return results


def _base_novel(logits: torch.Tensor, labels: torch.Tensor) -> dict:
    """CoOp's base-to-novel protocol: first ceil(n/2) labels are base; each half is classified among its own classes."""
    n = logits.shape[1]
    cut = (n + 1) // 2
    base, novel = labels < cut, labels >= cut
    base_top1 = (logits[base][:, :cut].argmax(-1) == labels[base]).float().mean()
    novel_top1 = (logits[novel][:, cut:].argmax(-1) + cut == labels[novel]).float().mean()
    return {"base_top1": float(base_top1), "base_chance": 1.0 / cut,
            "novel_top1": float(novel_top1), "novel_chance": 1.0 / (n - cut)}
