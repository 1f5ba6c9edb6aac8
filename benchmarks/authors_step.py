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
import functools
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_step import Bench, _sync, backbone, recipe_changes  # noqa: E402

# loralib/utils.py INDEX_POSITIONS_VISION is keyed by OpenAI's model names
OPENAI_NAMES = {"ViT-B-16": "ViT-B/16", "ViT-B-16-quickgelu": "ViT-B/16", "ViT-B-32": "ViT-B/32", "ViT-L-14": "ViT-L/14"}


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
        return (f"text positions run per prompt: ours {positions(ours)} (to the longest prompt's end), "
                f"authors {self.texts.shape[1]}")

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


class AuthorsMMRLpp:
    """yunncheng/MMRL (MMRL++): clip.build_model_MMRLpp and trainers/mmrlpp.py's CustomCLIP and MMRLpp_Loss on the
    model, and forward_backward's fp32 branch as its step (Dassl's AdamW over the model's parameters)."""

    def __init__(self, checkout: Path, arch: str, ours: Bench, steps: int):
        import torch

        if not (checkout / "trainers" / "mmrlpp.py").is_file():
            sys.exit(f"{checkout}: no trainers/mmrlpp.py here; give a checkout of yunncheng/MMRL")
        sys.path.insert(0, str(checkout))
        _stub_dassl()
        import open_clip
        from clip import clip
        from trainers import mmrlpp

        recipe, names = ours.model.recipe, ours.names
        state = backbone(arch)[0].state_dict()  # OpenAI's layout: the keys their build_model reads
        context = state["positional_embedding"].shape[0]  # 77 in OpenAI's models; their calls leave tokenize's default
        clip.tokenize = functools.partial(clip.tokenize, context_length=context)
        layers = list(range(ours.model.start, ours.model.vision.layers + 1))
        design = {"model": "MMRLpp", "rep_tokens_layers": layers, "n_rep_tokens": recipe.tokens,
                  "proj_lora_dim": recipe.projection_rank, "beta": recipe.beta}
        clip_model = clip.build_model_MMRLpp(dict(state), design).float()  # PREC amp: CLIP in fp32
        frozen = clip.build_model_MMRLpp(dict(state), {**design, "model": "CLIP"}).float()
        self.loaded = len(state) - len(clip_model.load_state_dict(state, strict=False).unexpected_keys)
        self.tensors = len(state)
        mmrlpp_cfg = SimpleNamespace(N_REP_TOKENS=recipe.tokens, REP_DIM=recipe.rep_dim, REP_LAYERS=layers,
                                     PROJ_LORA_DIM=recipe.projection_rank, RES_LORA_DIM=recipe.aligner_rank,
                                     BETA=recipe.beta, ALPHA=recipe.alpha, REG_WEIGHT=recipe.reg_weight)
        size = clip_model.visual.input_resolution
        cfg = SimpleNamespace(TRAINER=SimpleNamespace(MMRLpp=mmrlpp_cfg), INPUT=SimpleNamespace(SIZE=(size, size)),
                              DATASET=SimpleNamespace(NAME="ImageNet"))  # ImageNet's CUSTOM_TEMPLATES: a photo of a {}.
        self.model = mmrlpp.CustomCLIP(cfg, names, clip_model).to(ours.device).train()
        updated = ["representation_learner", "image_encoder.proj_rep", "image_encoder.A", "image_encoder.B"]
        for name, param in self.model.named_parameters():  # build_model's names_to_update
            param.requires_grad_(any(part in name for part in updated))
        self.trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        with torch.no_grad():  # _get_text_base_features_zero_shot without its .cuda()
            tokens = torch.cat([clip.tokenize(f"a photo of a {name.replace('_', ' ')}.") for name in names])
            text = mmrlpp.TextEncoder_CLIP(frozen)(frozen.token_embedding(tokens), tokens)
            self.text_features_clip = (text / text.norm(dim=-1, keepdim=True)).to(ours.device)
        self.image_encoder_clip = frozen.visual.to(ours.device)
        self.criterion = mmrlpp.MMRLpp_Loss(reg_weight=recipe.reg_weight, alpha=recipe.alpha)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay,
                                           betas=(0.9, 0.999))  # Dassl's build_optimizer for adamw
        self.images, self.labels, self.device = ours.images, ours.labels, ours.device
        self.context = tokens.shape[1]
        self.quick_gelu = (open_clip.get_model_config(arch) or {}).get("quick_gelu", False)

    def step(self) -> float:
        import torch

        _sync(self.device)
        start = time.perf_counter()
        with torch.no_grad():
            image_features_clip = self.image_encoder_clip(self.images)
            image_features_clip = image_features_clip / image_features_clip.norm(dim=-1, keepdim=True)
        logits, logits_rep, _, image_features, text_features = self.model(self.images)
        loss = self.criterion(logits, logits_rep, image_features, text_features, image_features_clip,
                              self.text_features_clip, self.labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        _sync(self.device)
        return time.perf_counter() - start

    def cosines(self):
        """[B, 2, C]: the cosines of the CLS and the representation features with each class's text features."""
        import torch

        self.model.text_features_for_inference = None  # their eval forward keeps the first text features it computes
        logits, logits_rep, *_ = self.model(self.images)
        return torch.stack([logits, logits_rep], 1) / 100.0

    def ours_cosines(self, ours):
        import torch
        import torch.nn.functional as F

        text = F.normalize(ours.compute_text_features(ours.names, ours.recipe.template), dim=-1)  # [C, E]
        return torch.einsum("bke,ce->bkc", ours.encode(ours.image_prefix(self.images)), text)

    def share_weights(self, ours) -> None:
        """Ours's tokens, aligners and proj_rep's A into theirs, one random B per aligner and for proj_rep into both."""
        import torch

        if not self.quick_gelu:  # their CLIP has OpenAI's QuickGELU, open_clip's ViT-B-16 GELU
            raise SkipAgreement("activations differ: give --arch ViT-B-16-quickgelu, OpenAI's layout")
        generator = torch.Generator().manual_seed(1)
        learner = self.model.representation_learner

        def random_b(like):
            return 0.5 * torch.randn(like.shape, generator=generator)

        with torch.no_grad():
            learner.compound_rep_tokens.copy_(ours.bank)
            for theirs, mine in ((learner.srra_r2vproj, ours.vision_aligners), (learner.srra_r2tproj, ours.text_aligners)):
                theirs.weight.copy_(mine.weight)
                for aligner, a, b, bias in zip(theirs.srra, mine.a, mine.b, mine.bias):
                    b.copy_(random_b(b))
                    aligner.A.copy_(a), aligner.B.copy_(b), aligner.bias.copy_(bias)
            ours.projection_b.copy_(random_b(ours.projection_b))
            self.model.image_encoder.A.copy_(ours.projection_a), self.model.image_encoder.B.copy_(ours.projection_b)

    def note(self, ours) -> str:
        return (f"frozen tensors loaded into theirs: {self.loaded} of {self.tensors}; text positions run per prompt: "
                f"ours {positions(ours)}, authors {self.context} (+ {ours.recipe.tokens} tokens from layer {ours.start} "
                "on, both)")


class SkipAgreement(Exception):
    """The two models cannot compute the same features (the reason says why); the cost is still compared."""


def positions(ours) -> int:
    """The text positions our tower runs for the class list's prompts (up to the longest one's end-of-text)."""
    from dear.methods import prompts, towers

    texts = [prompts.hand_written(ours.recipe.template, name).text for name in ours.names]
    return towers.text_input(ours.clip, ours.tokenizer, texts).tokens.shape[1]


def _stub_dassl() -> None:
    """Their trainer module imports Dassl's engine, metrics, utils and optim; the step uses none of them, so
    where Dassl is not installed, empty stand-ins satisfy the imports."""
    import importlib.util
    import types

    if "dassl" in sys.modules or importlib.util.find_spec("dassl") is not None:
        return
    registry = types.SimpleNamespace(register=lambda: (lambda cls: cls))
    for name, values in {"engine": {"TRAINER_REGISTRY": registry, "TrainerX": object},
                         "metrics": {"compute_accuracy": None},
                         "utils": {"load_pretrained_weights": None, "load_checkpoint": None},
                         "optim": {"build_optimizer": None, "build_lr_scheduler": None}}.items():
        module = types.ModuleType(f"dassl.{name}")
        module.__dict__.update(values)
        sys.modules[f"dassl.{name}"] = module
    sys.modules["dassl"] = types.ModuleType("dassl")


AUTHORS = {"clip_lora": AuthorsCLIPLoRA, "mmrlpp": AuthorsMMRLpp}


def compare(method: str, checkout: Path, args) -> dict:
    import torch

    ours_model, tokenizer = backbone(args.arch)
    ours = Bench(ours_model, tokenizer, method, args.classes, args.batch, args.device, recipe_changes(args.set),
                 args.shots)
    ours.model.names = ours.names
    theirs = AUTHORS[method](checkout, args.arch, ours, steps=args.warmup + args.rounds)
    difference = moved = float("nan")
    ours.model.eval()
    try:
        with torch.no_grad():
            untrained = theirs.ours_cosines(ours.model)
            theirs.share_weights(ours.model)
            theirs.model.eval()  # after the sharing: their LinearLoRA merges B A into W when set to eval
            trained = theirs.ours_cosines(ours.model)
            difference = (theirs.cosines() - trained).abs().max().item()
            moved = (trained - untrained).abs().max().item()
    except SkipAgreement as reason:
        print(f"{method}: no agreement check: {reason}")
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
