"""Our training step against the authors' own code on the same model and batch: agreement and cost.

dear holds none of the authors' code, so point this script at a checkout of their repository:

    python benchmarks/authors_step.py --clip-lora ~/src/CLIP-LoRA            # MaxZanella/CLIP-LoRA (its loralib/)
    python benchmarks/authors_step.py --clip-lora ~/src/CLIP-LoRA --arch dear-world --classes 10
    python benchmarks/authors_step.py --tac ~/src/TAC --arch ViT-B-16-quickgelu --classes 10 --batch 2
    python benchmarks/authors_step.py --tip-adapter-f ~/src/Tip-Adapter --arch dear-world --classes 10

TAC and Tip-Adapter-F compare more than the cosines (`agreement`): TAC at init and after one step of their own
TAC.forward_backward (description features, cosines, each loss term, every learnable tensor); Tip-Adapter-F through
their run_tip_adapter_F (the keys after one step, every tip_logits their search_hp scores, its choice).

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
import contextlib
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


class AuthorsTAC:
    """FushengHao/TAC: trainers/tac.py's CustomCLIP (VLPromptLearner, TextEncoder) on clip/model.py's IVLP CLIP, and
    TAC.forward_backward itself (its fp16/fp32 branch, Dassl's SGD) as its step, on EuroSAT's class names and their
    descriptions/eurosat_prompt.json, 4 views of each image and img0."""

    DATASET, FILE = "EuroSAT", "eurosat_prompt.json"  # Dassl's name (their dataset_name_mapping) and its file

    @staticmethod
    def changes(checkout: Path, arch: str) -> dict:
        """Their basetonovel.yaml over ours's demo values: every layer prompted, 4 views and img0, their file."""
        import open_clip

        config = open_clip.get_model_config(arch) or {}
        return {"tac": {"vision_depth": config.get("vision_cfg", {}).get("layers", 12), "n_ctx": 5, "n_ctx_vision": 5,
                        "text_depth": config.get("text_cfg", {}).get("layers", 12), "k_transforms": 4, "clusters": 5,
                        "return_img0": True, "epochs": 20, "warmup_epochs": 0,  # the peak lr, not the warm-up's
                        # 1e-5, in both: a step that moves the tensors enough to check
                        "descriptions": str(checkout / "descriptions" / AuthorsTAC.FILE)}}

    def __init__(self, checkout: Path, arch: str, ours: Bench, steps: int):
        import json
        import os

        import open_clip
        import torch

        if not (checkout / "trainers" / "tac.py").is_file():
            sys.exit(f"{checkout}: no trainers/tac.py here; give a checkout of FushengHao/TAC")
        _fresh_import(checkout)
        _stub_dassl()
        _stub_kmeans()
        from clip import clip
        from trainers import tac

        recipe = ours.model.recipe
        self.quick_gelu = (open_clip.get_model_config(arch) or {}).get("quick_gelu", False)
        names = list(json.loads((checkout / "descriptions" / self.FILE).read_text()))[:len(ours.names)]
        ours.names = ours.model.names = names  # the classes their file describes (also ours_cosines')
        state = backbone(arch)[0].state_dict()

        def load_clip_to_cpu(cfg, zero_shot_model=False):  # theirs reads OpenAI's file; the same weights, fp32
            depth = (0, 0) if zero_shot_model else (recipe.vision_depth, recipe.text_depth)
            design = {"trainer": "IVLP", "vision_depth": depth[0], "language_depth": depth[1],
                      "vision_ctx": 0 if zero_shot_model else recipe.n_ctx_vision,
                      "language_ctx": 0 if zero_shot_model else recipe.n_ctx}
            model = clip.build_model(dict(state), design).float()  # build_model rounds to fp16: reload in fp32
            model.load_state_dict(state, strict=False)
            return model

        tac.load_clip_to_cpu = load_clip_to_cpu
        size = state["visual.conv1.weight"].shape[-1] * round((state["visual.positional_embedding"].shape[0] - 1) ** 0.5)
        trainer = SimpleNamespace(N_CTX_VISION=recipe.n_ctx_vision, N_CTX_TEXT=recipe.n_ctx, CTX_INIT=recipe.ctx_init,
                                  PREC="fp32", PROMPT_DEPTH_VISION=recipe.vision_depth,
                                  PROMPT_DEPTH_TEXT=recipe.text_depth, TEXT_LOSS_WEIGHT=recipe.text_loss_weight,
                                  IMAGE_LOSS_WEIGHT=recipe.image_loss_weight)  # PREC fp32: their CPU run; fp16's branch
        cfg = SimpleNamespace(TRAINER=SimpleNamespace(TAC=trainer), INPUT=SimpleNamespace(SIZE=(size, size)),
                              DATASET=SimpleNamespace(NAME=self.DATASET), OPTIM=SimpleNamespace(MAX_EPOCH=recipe.epochs),
                              DATALOADER=SimpleNamespace(K_TRANSFORMS=recipe.k_transforms),
                              MODEL=SimpleNamespace(BACKBONE=SimpleNamespace(NAME=arch)))
        here = os.getcwd()
        os.chdir(checkout)  # their VLPromptLearner opens ./descriptions/<dataset>_prompt.json
        try:
            with _cuda_is_cpu(), contextlib.redirect_stdout(sys.stderr):  # their prints, out of the table
                self.model = tac.CustomCLIP(cfg, names, load_clip_to_cpu(cfg)).to(ours.device)
        finally:
            os.chdir(here)
        self.model.VPT_topk_t.float(), self.model.VPT_topk_v.float()  # their .half(); on CPU fp32 as ours
        for name, param in self.model.named_parameters():  # TAC.build_model's names_to_update
            if "prompt_learner" not in name:
                param.requires_grad_("VPT" in name)
            elif "ZS_image_encoder" in name:
                param.requires_grad_(False)
        self.trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.lr = ours.loop.scheduler.get_last_lr()[0]  # the first step's (Dassl's constant warm-up)
        self.optim = torch.optim.SGD([p for p in self.model.parameters() if p.requires_grad], lr=self.lr,
                                     momentum=recipe.momentum, weight_decay=recipe.weight_decay)
        self.trainer = SimpleNamespace(model=self.model, optim=self.optim, scaler=None, cfg=cfg, device=ours.device,
                                       k_transforms=recipe.k_transforms, batch_idx=0, num_batches=2, step_counter=1)
        self.trainer.parse_batch_train = functools.partial(tac.TAC.parse_batch_train, self.trainer)
        views = ours.images  # `Views`: [k B] view-major, img0 [B]
        self.batch = {"img": views.pixels, "label": ours.labels[:len(views.img0)], "img0": views.img0}
        self.forward_backward = functools.partial(tac.TAC.forward_backward, self.trainer)
        self.device = ours.device

    def step(self) -> float:
        _sync(self.device)
        start = time.perf_counter()
        with _cuda_is_cpu():
            self.forward_backward(self.batch)
        _sync(self.device)
        return time.perf_counter() - start

    def share_weights(self, ours) -> None:
        """Ours's tensors into theirs; the prompts rounded to fp16 on both sides first (their blocks cast VPT and
        VPT_shallow to half at every forward, whatever PREC), and ours's k-means centres as their topk."""
        import torch

        model = self.model
        with torch.no_grad():
            for tensor in (ours.vision_prompts, ours.text_prompts):
                tensor.copy_(tensor.half().float())
            model.prompt_learner.ctx.copy_(ours.context)
            model.image_encoder.VPT.copy_(ours.vision_prompts[0])
            blocks = model.image_encoder.transformer.resblocks
            for layer in range(1, ours.vision_depth):
                blocks[layer].VPT_shallow.copy_(ours.vision_prompts[layer])
            blocks = model.text_encoder.transformer.resblocks
            for layer in range(1, ours.text_depth):
                blocks[layer].VPT_shallow.copy_(ours.text_prompts[layer - 1])
            model.VPT_topk_t.load_state_dict(ours.cluster_text.state_dict())
            model.VPT_topk_v.load_state_dict(ours.cluster_image.state_dict())
            model.topk.data = ours.centres.clone()  # their prompt_learner.topk, the same tensor

    def pairs(self, ours):
        """(their tensor, ours) of every learnable tensor."""
        model = self.model
        vision = [model.image_encoder.VPT] + [model.image_encoder.transformer.resblocks[layer].VPT_shallow
                                              for layer in range(1, ours.vision_depth)]
        text = [model.text_encoder.transformer.resblocks[layer].VPT_shallow for layer in range(1, ours.text_depth)]
        return [(model.prompt_learner.ctx, ours.context), (torch_stack(vision), ours.vision_prompts),
                (torch_stack(text), ours.text_prompts), (model.VPT_topk_t.weight, ours.cluster_text.weight),
                (model.VPT_topk_v.weight, ours.cluster_image.weight)]

    def agreement(self, bench) -> dict:
        """At init: the description features, the test cosines and each loss term with the same dropout draws; after
        one step of each (their forward_backward, our trainer's step): every learnable tensor and the cosines."""
        import torch
        import torch.nn.functional as F

        from dear.train.trainer import step_of_batch, update

        ours, views = bench.model, bench.images
        if not self.quick_gelu:  # their CLIP has OpenAI's QuickGELU, open_clip's ViT-B-16 GELU
            raise SkipAgreement("activations differ: give --arch ViT-B-16-quickgelu, OpenAI's layout")
        ours.cluster(bench.names)
        self.share_weights(ours)
        found = {"descriptions": (self.model.prompt_learner.fixed_embeddings - ours.descriptions(bench.names)).abs().max()}

        def cosines():
            with torch.no_grad():
                self.model.eval(), ours.eval()
                theirs = self.model(views.pixels.type(self.model.dtype)) / self.model.logit_scale.exp()
                mine = ours.encode(ours.image_prefix(views.pixels))[:, 0] @ F.normalize(
                    ours.compute_text_features(bench.names, None), dim=-1).T
                self.model.train(), ours.train()
                return (theirs - mine).abs().max(), mine

        found["cosines at init"], before = cosines()
        start = [mine.detach().clone() for _, mine in self.pairs(ours)]
        torch.manual_seed(11)
        with _cuda_is_cpu():
            terms = self.forward_backward(self.batch)  # theirs: the loss, then one SGD step
        torch.manual_seed(11)
        result = step_of_batch(ours, views, bench.labels, bench.names, bench.precision)
        update(bench.loop, result.total)
        mine = {"loss_ce": result.terms["ce"].detach(), "loss_scl_text": ours.recipe.text_loss_weight * result.terms["txt"].detach(),
                "loss_scl_image": ours.recipe.image_loss_weight * result.terms["img"].detach()}
        found.update({f"{name} at init": abs(terms[name] - float(mine[name])) for name in terms})
        found["first loss (theirs, ours)"] = (sum(terms.values()), float(result.total))
        found["their first terms (ce, 20 L1 text, 25 L1 image)"] = tuple(round(v, 4) for v in terms.values())
        found["learnable tensors after one step"] = max(float((their.detach() - mine.detach()).abs().max())
                                                        for their, mine in self.pairs(ours))
        found["the step moves them"] = max(float((mine.detach() - was).abs().max())
                                           for (_, mine), was in zip(self.pairs(ours), start))
        found["cosines after one step"], after = cosines()
        found["the step moves the cosines"] = (after - before).abs().max()
        trained = [ours.vision_prompts.detach().clone(), ours.text_prompts.detach().clone()]
        with torch.no_grad():  # their blocks cast VPT and VPT_shallow to half at every forward (clip/model.py)
            ours.vision_prompts.copy_(trained[0].half().float()), ours.text_prompts.copy_(trained[1].half().float())
            found["cosines after one step, ours's prompts cast to fp16 as theirs"] = cosines()[0]
            ours.vision_prompts.copy_(trained[0]), ours.text_prompts.copy_(trained[1])
        return {key: float(value) if not isinstance(value, tuple) else value for key, value in found.items()}

    def note(self, ours) -> str:
        return (f"{len(self.batch['img0'])} images x {self.trainer.k_transforms} views a step, img0's frozen feature; "
                f"lr {self.lr:g}, their descriptions/{self.FILE}")


class AuthorsTipAdapterF:
    """gaopengcuhk/Tip-Adapter: main.py's run_tip_adapter_F itself (one epoch of one batch of the keys' fine-tuning,
    then utils.py's search_hp on the validation features) on features given to it, beside ours on the same ones."""

    SHOTS, NOISE = 2, 0.5  # validation features per class, and how far they lie from a cached key of their class

    @staticmethod
    def changes(checkout: Path, arch: str) -> dict:
        """oxford_flowers' search ranges (alpha up to 50): the cache can outweigh a random CLIP's logits, so the
        search has a pair to find rather than keeping its first."""
        return {"tip_adapter_f": {"search_scale": [50.0, 50.0]}}

    def __init__(self, checkout: Path, arch: str, ours: Bench, steps: int):
        import importlib.util

        if not (checkout / "main.py").is_file() or not (checkout / "utils.py").is_file():
            sys.exit(f"{checkout}: no main.py and utils.py here; give a checkout of gaopengcuhk/Tip-Adapter")
        _fresh_import(checkout)
        _stub_modules("gdown")  # their datasets/utils.py downloads with it; main.py imports it, the run does not
        spec = importlib.util.spec_from_file_location("tip_adapter_main", checkout / "main.py")
        self.main = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.main)
        self.utils = sys.modules["utils"]
        self.trainable = ours.trainable
        self.model = SimpleNamespace(eval=lambda: None, train=lambda: None)

    def agreement(self, bench) -> dict:
        """The keys after one step of each, every tip_logits matrix their search_hp scores against ours's at the same
        (beta, alpha), and the pair each search keeps."""
        import tempfile

        import torch
        import torch.nn.functional as F

        from dear.methods import tip_adapter_f as tip
        from dear.train.trainer import update

        ours, names, recipe = bench.model, bench.names, bench.model.recipe
        generator = torch.Generator().manual_seed(2)
        with torch.no_grad():
            ours.keys.copy_(F.normalize(torch.randn(ours.keys.shape, generator=generator), dim=-1))
        keys, labels = ours.keys.detach().clone(), ours.cache_labels  # [N, E], [N]: the cache
        near = lambda rows: F.normalize(keys[rows] + self.NOISE * torch.randn(len(rows), keys.shape[1],  # noqa: E731
                                                                               generator=generator), dim=-1)
        train_rows = torch.randperm(len(keys), generator=generator)[:recipe.batch_size]
        train, train_labels = near(train_rows), labels[train_rows]
        val_rows = torch.arange(self.SHOTS * len(names)) % len(keys)
        val, val_labels = near(val_rows), labels[val_rows]
        with torch.no_grad():
            clip_weights = F.normalize(ours.text_features(names).float(), dim=-1).T  # [E, C]: one classifier for both
        values = F.one_hot(labels, len(names)).float()  # [N, C]

        step = ours.step(None, train_labels, names, train)  # ours: one step on the batch's frozen features
        update(bench.loop, step.total)
        pairs = [(beta, alpha) for beta in tip.grid(*[recipe.search_scale[0], recipe.search_step[0]])
                 for alpha in tip.grid(recipe.search_scale[1], recipe.search_step[1])]
        seen = {"calls": 0, "logits": 0.0}
        cls_acc, search_hp = self.utils.cls_acc, self.main.search_hp

        def watched_acc(output, target, topk=1):  # their calls: training, test, then search_hp's pairs in order
            index = seen["calls"] - 2
            seen["calls"] += 1
            if 0 <= index < len(pairs) and len(output) == len(val):
                beta, alpha = pairs[index]
                with torch.no_grad():
                    mine = ours.tip_logits(val, names, alpha, beta)
                seen["logits"] = max(seen["logits"], float((output - mine).abs().max()))
            return accuracy(output, target)

        def accuracy(output, target):  # their cls_acc at topk 1: its float() of a 1-element array fails on NumPy 2
            return 100 * float((output.topk(1, 1, True, True)[1].t()[0] == target).float().sum()) / target.shape[0]

        def watched_search(cfg, cache_keys, cache_values, features, labels_, clip_weights_, adapter=None):
            seen["keys"] = adapter.weight.detach().clone()
            seen["choice"] = search_hp(cfg, cache_keys, cache_values, features, labels_, clip_weights_, adapter)
            return seen["choice"]

        with tempfile.TemporaryDirectory() as folder, _cuda_is_cpu(), contextlib.redirect_stdout(sys.stderr):
            cfg = {"lr": recipe.lr, "train_epoch": 1, "init_beta": recipe.init_beta, "init_alpha": recipe.init_alpha,
                   "search_hp": True, "search_scale": recipe.search_scale, "search_step": recipe.search_step,
                   "cache_dir": folder, "shots": self.SHOTS}
            torch.save(keys.clone(), f"{folder}/best_F_{self.SHOTS}shots.pt")  # kept only if their test accuracy is 0
            clip_model = SimpleNamespace(dtype=torch.float32, encode_image=lambda images: images.clone())
            self.utils.cls_acc, self.main.cls_acc, self.main.search_hp = watched_acc, watched_acc, watched_search
            try:
                self.main.run_tip_adapter_F(cfg, keys.T.clone(), values, val, val_labels, val, val_labels, clip_weights,
                                            clip_model, [(train, train_labels)])
            finally:
                self.utils.cls_acc, self.main.cls_acc, self.main.search_hp = cls_acc, cls_acc, search_hp
        found = ours.search_validation(val[:, None], val_labels.tolist(), names)
        return {"keys after one step": float((seen["keys"] - ours.keys.detach()).abs().max()),
                "the step moves the keys": float((keys - ours.keys.detach()).abs().max()),
                f"tip_logits of their {len(pairs)} searched pairs": seen["logits"],
                "search choice (beta, alpha): theirs, ours": (tuple(round(v, 6) for v in seen["choice"]),
                                                               (round(found["beta"], 6), round(found["alpha"], 6)))}

    def note(self, ours) -> str:
        return "their keys' training and search_hp on the same normalized features (no CLIP forward: a stand-in)"


def torch_stack(tensors):
    import torch

    return torch.stack([t.detach() for t in tensors])


def _fresh_import(checkout: Path) -> None:
    """Their packages (`clip`, `trainers`) from this checkout: another authors' checkout may have loaded its own."""
    for name in [name for name in sys.modules if name.split(".")[0] in ("clip", "trainers", "utils", "datasets")]:
        del sys.modules[name]
    sys.path.insert(0, str(checkout))


@contextlib.contextmanager
def _cuda_is_cpu():
    """Their `.cuda()` calls (the frozen CLIP, the loss's targets) as no-ops where there is no CUDA device."""
    import torch

    if torch.cuda.is_available():
        yield
        return
    saved = torch.Tensor.cuda, torch.nn.Module.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.cuda, torch.nn.Module.cuda = saved


def _stub_modules(*names: str) -> None:
    """Empty stand-ins for modules their files import at the top but the compared code never calls."""
    import importlib.util
    import types

    for name in names:
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = types.ModuleType(name)


def _stub_kmeans() -> None:
    """kmeans_pytorch (their clustering) where it is not installed: the harness replaces the centres by ours's, so
    the stand-in returns the first rows (the clustering itself: tests/methods/test_parity_tac.py)."""
    import importlib.util
    import types

    if importlib.util.find_spec("kmeans_pytorch") is not None:
        return
    module = types.ModuleType("kmeans_pytorch")
    module.kmeans = lambda X, num_clusters, **kwargs: (None, X[:num_clusters].clone())
    sys.modules["kmeans_pytorch"] = module


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


AUTHORS = {"clip_lora": AuthorsCLIPLoRA, "mmrlpp": AuthorsMMRLpp, "tac": AuthorsTAC, "tip_adapter_f": AuthorsTipAdapterF}
BASE_TO_NOVEL = ("tac",)  # their repository has no few-shot config: its base-to-novel recipe


def compare(method: str, checkout: Path, args) -> dict:
    import torch

    authors = AUTHORS[method]
    changes = recipe_changes(args.set)
    for name, keys in (authors.changes(checkout, args.arch) if hasattr(authors, "changes") else {}).items():
        changes[name] = {**keys, **changes.get(name, {})}  # the harness's values, under the command line's --set
    ours_model, tokenizer = backbone(args.arch)
    ours = Bench(ours_model, tokenizer, method, args.classes, args.batch, args.device, changes,
                 None if method in BASE_TO_NOVEL else args.shots)
    if not hasattr(ours.model, "names"):  # Tip-Adapter-F keeps its cached classes under that name
        ours.model.names = ours.names  # the class list ours_cosines scores
    theirs = authors(checkout, args.arch, ours, steps=args.warmup + args.rounds)
    found = {"method": method, "trainable_ours": ours.trainable, "trainable_authors": theirs.trainable,
             "threads": torch.get_num_threads()}
    try:
        found["agreement"] = theirs.agreement(ours) if hasattr(theirs, "agreement") else cosine_agreement(ours, theirs)
    except SkipAgreement as reason:
        print(f"{method}: no agreement check: {reason}")
        found["agreement"] = {}
    ours.model.train(), theirs.model.train()
    found["note"] = theirs.note(ours.model)
    if not hasattr(theirs, "step"):
        return found
    times = {"ours": [], "authors": []}
    for index in range(args.warmup + args.rounds):
        for name, bench in (("ours", ours), ("authors", theirs)):
            seconds = bench.step()
            if index >= args.warmup:
                times[name].append(seconds)
    return {**found, **{f"{name}_median_s": statistics.median(t) for name, t in times.items()},
            **{f"{name}_min_s": min(t) for name, t in times.items()}}


def cosine_agreement(ours: Bench, theirs) -> dict:
    """The same trainable values in both: the largest difference of the cosine matrices, and how far the shared
    update moves ours's (the check's scale)."""
    import torch

    ours.model.eval()
    with torch.no_grad():
        untrained = theirs.ours_cosines(ours.model)
        theirs.share_weights(ours.model)
        theirs.model.eval()  # after the sharing: their LinearLoRA merges B A into W when set to eval
        trained = theirs.ours_cosines(ours.model)
        return {"max |cosine difference|": (theirs.cosines() - trained).abs().max().item(),
                "the update moves the cosines": (trained - untrained).abs().max().item()}


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
    for method, checkout in checkouts.items():
        r = compare(method, checkout, args)
        print(f"{method}: trainable ours {r['trainable_ours']:,} / authors {r['trainable_authors']:,}; {r['note']}")
        for what, value in r["agreement"].items():
            print(f"  {what}: {value:.2e}" if isinstance(value, float) else f"  {what}: {value}")
        if "ours_median_s" in r:
            print(f"  step: ours {r['ours_median_s']:.3f} s, authors {r['authors_median_s']:.3f} s, ours / authors "
                  f"{r['ours_median_s'] / r['authors_median_s']:.2f}x (min {r['ours_min_s'] / r['authors_min_s']:.2f}x, "
                  f"{r['threads']} threads)")


if __name__ == "__main__":
    main()
