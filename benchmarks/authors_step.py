"""Our training step against the authors' own code on the same model and batch: agreement and cost.

dear holds none of the authors' code, so point this script at a checkout of their repository:

    python benchmarks/authors_step.py --clip-lora ~/src/CLIP-LoRA            # MaxZanella/CLIP-LoRA (its loralib/)
    python benchmarks/authors_step.py --clip-lora ~/src/CLIP-LoRA --arch dear-world --classes 10

One random-weight open_clip model is built twice from one seed: ours on one copy (`dear.methods.create`, the
few-shot recipe at `--shots`, through `benchmarks/train_step.py`'s Bench), the authors' modules applied to the
other. open_clip's OpenAI layout has the `transformer.resblocks` / `visual.transformer.resblocks` of
nn.MultiheadAttention that their `apply_lora` walks, so their layers run unchanged; the loop around them is
lora.py's (text features of every class recomputed each step, 100 · cos, cross-entropy, AdamW with weight
decay 1e-2, cosine schedule), fp32 on CPU as ours (their autocast is CUDA's).

1. Agreement: the same trainable values in both (ours copied into theirs, B drawn at random so the update is
   not zero), dropout off: the largest difference of the two cosine matrices [batch, classes], beside how far
   the update moves them (the check's scale), and the trainable counts.
2. Cost: one training step of each in turn, `--rounds` times after a warm-up; the median and its ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import Bench, backbone, recipe_changes  # noqa: E402

# loralib/utils.py INDEX_POSITIONS_VISION is keyed by OpenAI's model names
OPENAI_NAMES = {"ViT-B-16": "ViT-B/16", "ViT-B-32": "ViT-B/32", "ViT-L-14": "ViT-L/14"}


class AuthorsCLIPLoRA:
    """MaxZanella/CLIP-LoRA: loralib's apply_lora on the model, and lora.py's training-loop body as its step."""

    def __init__(self, checkout: Path, arch: str, ours: Bench, steps: int):
        import torch

        if not (checkout / "loralib" / "utils.py").is_file():
            sys.exit(f"{checkout}: no loralib/utils.py here; give a checkout of MaxZanella/CLIP-LoRA")
        sys.path.insert(0, str(checkout))
        from loralib.utils import apply_lora, get_lora_parameters, mark_only_lora_as_trainable

        recipe = ours.model.recipe
        self.model, tokenizer = backbone(arch)
        args = SimpleNamespace(encoder=recipe.encoder, position=recipe.position, backbone=OPENAI_NAMES.get(arch, "ViT-B/16"),
                               params=list(recipe.matrices), r=recipe.rank, alpha=recipe.lora_alpha,
                               dropout_rate=recipe.dropout)
        apply_lora(args, self.model)
        mark_only_lora_as_trainable(self.model)
        self.model = self.model.to(ours.device).train()
        parameters = get_lora_parameters(self.model)
        self.trainable = sum(p.numel() for p in parameters)
        self.optimizer = torch.optim.AdamW(parameters, weight_decay=1e-2, betas=(0.9, 0.999), lr=recipe.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, steps, eta_min=1e-6)
        self.template = recipe.template
        self.texts = tokenizer([self.template.format(name.replace("_", " ")) for name in ours.names]).to(ours.device)
        self.images, self.labels, self.device = ours.images, ours.labels, ours.device

    def note(self, ours) -> str:
        """What differs in the work done: the text positions each tower runs per prompt."""
        run = ours.prompt_input(ours.names, self.template).tokens.shape[1]
        return f"text positions run per prompt: ours {run} (to the longest prompt's end), authors {self.texts.shape[1]}"

    def cosines(self):
        """[B, C] cosine of each image's and each class's features."""
        import torch.nn.functional as F

        return F.normalize(self.model.encode_image(self.images), dim=-1) @ F.normalize(
            self.model.encode_text(self.texts), dim=-1).T

    def step(self) -> float:
        import torch.nn.functional as F

        _sync(self.device)
        start = time.perf_counter()
        loss = F.cross_entropy(100.0 * self.cosines(), self.labels)  # main.py: logit_scale = 100
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        _sync(self.device)
        return time.perf_counter() - start

    def share_weights(self, ours) -> None:
        """Ours's A into theirs, one random B into both: the same nonzero update on each side."""
        import torch

        generator = torch.Generator().manual_seed(1)
        towers = [(self.model.transformer.resblocks, ours.text_layers, ours.text_updates),
                  (self.model.visual.transformer.resblocks, ours.image_layers, ours.image_updates)]
        with torch.no_grad():
            for blocks, layers, updates in towers:
                for layer, update in zip(layers, updates):
                    attention = blocks[layer - 1].attn
                    for matrix in update.matrices:
                        b = 0.5 * torch.randn(update.b[matrix].shape, generator=generator)
                        update.b[matrix].copy_(b)
                        projection = getattr(attention, f"{matrix}_proj")
                        projection.w_lora_A.copy_(update.a[matrix])
                        projection.w_lora_B.copy_(b)

    def ours_cosines(self, ours):
        import torch.nn.functional as F

        image = ours.encode(ours.image_prefix(self.images))[:, 0]  # [B, E], normalized
        return image @ F.normalize(ours.compute_text_features(ours.names, self.template), dim=-1).T


AUTHORS = {"clip_lora": AuthorsCLIPLoRA}


def compare(method: str, checkout: Path, args) -> dict:
    import torch

    ours_model, tokenizer = backbone(args.arch)
    ours = Bench(ours_model, tokenizer, method, args.classes, args.batch, args.device, recipe_changes(args.set),
                 args.shots)
    ours.model.names = ours.names
    theirs = AUTHORS[method](checkout, args.arch, ours, steps=args.warmup + args.rounds)
    ours.model.eval()
    with torch.no_grad():
        untrained = theirs.ours_cosines(ours.model)
        theirs.share_weights(ours.model)
        theirs.model.eval()  # after the sharing: their LinearLoRA merges B A into W when set to eval
        trained = theirs.ours_cosines(ours.model)
        difference = (theirs.cosines() - trained).abs().max().item()
        moved = (trained - untrained).abs().max().item()
    ours.model.train(), theirs.model.train()
    times = {"ours": [], "authors": []}
    for index in range(args.warmup + args.rounds):
        for name, bench in (("ours", ours), ("authors", theirs)):
            seconds = bench.step()
            if index >= args.warmup:
                times[name].append(seconds)
    return {"method": method, "max_cosine_difference": difference, "update_moves": moved, "trainable_ours": ours.trainable,
            "trainable_authors": theirs.trainable, "threads": torch.get_num_threads(), "note": theirs.note(ours.model),
            **{f"{name}_median_s": statistics.median(t) for name, t in times.items()},
            **{f"{name}_min_s": min(t) for name, t in times.items()}}


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for method, authors in AUTHORS.items():
        parser.add_argument(f"--{method.replace('_', '-')}", type=Path, metavar="CHECKOUT",
                            help=f"a checkout of {authors.__doc__.split(':')[0]}")
    parser.add_argument("--arch", default="ViT-B-16", help="open_clip architecture (random weights)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--shots", type=int, default=16, help="the few-shot recipe of this shot count")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--set", action="append", default=[], metavar="RECIPE.KEY=VALUE",
                        help="change a recipe of params.yaml for this run (a YAML value)")
    args = parser.parse_args()
    checkouts = {method: getattr(args, method) for method in AUTHORS if getattr(args, method)}
    if not checkouts:
        parser.error("give at least one authors' checkout: " + ", ".join(f"--{m.replace('_', '-')}" for m in AUTHORS))
    print(f"{args.arch}, batch {args.batch}, {args.classes} classes, few-shot recipes at {args.shots} shots, "
          f"{args.device}; {args.rounds} interleaved rounds after {args.warmup} warm-up")
    print(f"{'method':<10} {'max |Δcos|':>11} {'update moves':>13} {'trainable ours / authors':>25} {'ours s':>7} {'authors s':>9} "
          f"{'ours / authors':>15}")
    for method, checkout in checkouts.items():
        r = compare(method, checkout, args)
        print(f"{method:<10} {r['max_cosine_difference']:>11.2e} {r['update_moves']:>13.2e} {r['trainable_ours']:>12,} / {r['trainable_authors']:<10,} "
              f"{r['ours_median_s']:>7.3f} {r['authors_median_s']:>9.3f} "
              f"{r['ours_median_s'] / r['authors_median_s']:>14.2f}x  (min {r['ours_min_s'] / r['authors_min_s']:.2f}x,"
              f" {r['threads']} threads)")
        print(f"{'':<10} {r['note']}")


if __name__ == "__main__":
    main()
