"""Parity with MMRL++'s code (yunncheng/MMRL@208ba96), written out in the tests.

The project holds none of the authors' code. The references below restate,
step by step and with open_clip's own modules (blocks called as modules, not
`dear.model.internals`), what their code computes: the representation learner
with its Shared_Residual_Representation_Aligner (trainers/mmrlpp.py), the
"MMRLpp" ResidualAttentionBlock and VisionTransformer (clip/model_mmrlpp.py:
tokens inserted at the first REP_LAYER, BETA x the layer's tokens + (1 - BETA)
x the previous layer's outputs after it; proj_rep = proj + A B), MMRLpp_Loss
and the test-time rule (B2N: fused on base, CLS on new; CD: fused on ImageNet,
CLS on the targets; FS: fused). From the same parameters on the same batch of
a small CLIP the project's model must give the same training logits, each loss
term, the total, the gradient of every learnable tensor, and the base and
novel test logits; the recipe of every paper-config job must be their configs'
(configs/trainers/MMRLpp/*.yaml, trainers/config.py per dataset and task).
"""

import math

import pytest
import torch
import torch.nn.functional as F
import yaml

from dear.methods import create
from dear.config.params import load_params
from dear.stages import evaluate as evaluate_stage
from tests import fake_run
from tests.methods_tools import Backbone, norm, recipe, tokenize
from tests.methods.test_parity import dassl_lr, our_epoch_lrs
from tests.tiny_clip import tiny_clip

BASE = ["sea_lion", "golden_retriever", "red car"]
NOVEL = ["tree", "hot_dog"]
TOL = dict(rtol=1e-4, atol=1e-5)
REP_LAYERS = [2, 3]  # the tiny CLIP below: 3 image and 3 text layers, tokens from layer 2 (theirs: 6-12 of 12)


@pytest.fixture(scope="module")
def clip():
    return tiny_clip(seed=3, text_layers=3)


# --- their forward ---------------------------------------------------------------------------

def their_srra(parts, bank):
    """Shared_Residual_Representation_Aligner: layer i maps the bank by F.linear(x, W + A_i @ B_i, bias_i)."""
    weight, a, b, bias = parts
    return [F.linear(bank, weight + a_i @ b_i, bias_i) for a_i, b_i, bias_i in zip(a, b, bias)]


def their_mmrlpp(clip, parts, classnames, images, beta, template="a photo of a {}."):
    """CustomCLIP.forward: (logits, logits_rep, image_features, text_features), normalized features."""
    bank, r2v, r2t, proj_a, proj_b = parts
    n = bank.shape[0]
    visual, text_tokens = their_srra(r2v, bank), their_srra(r2t, bank)
    # image: tokens after CLS at the first REP_LAYER; later ones: beta x the layer's + (1 - beta) x the previous
    x = clip.visual._embeds(images)
    counter = 0
    for index, block in enumerate(clip.visual.transformer.resblocks, 1):
        if index in REP_LAYERS:
            context = visual[counter].expand(x.shape[0], -1, -1)
            if index == REP_LAYERS[0]:
                x = torch.cat([x[:, :1], context, x[:, 1:]], 1)
            else:
                x = torch.cat([x[:, :1], beta * context + (1 - beta) * x[:, 1:1 + n], x[:, 1 + n:]], 1)
            counter += 1
        x = block(x)
    image = clip.visual.ln_post(x[:, 0]) @ clip.visual.proj
    rep = clip.visual.ln_post(x[:, 1:1 + n]).mean(1) @ (clip.visual.proj + proj_a @ proj_b)
    # text: the same after SOT, a causal mask over the grown sequence from the first REP_LAYER, EOT index + n
    tokenized = tokenize([template.format(name.replace("_", " ")) for name in classnames])
    y = clip.token_embedding(tokenized) + clip.positional_embedding
    mask, counter = clip.attn_mask, 0
    for index, block in enumerate(clip.transformer.resblocks, 1):
        if index in REP_LAYERS:
            context = text_tokens[counter].expand(y.shape[0], -1, -1)
            if index == REP_LAYERS[0]:
                y = torch.cat([y[:, :1], context, y[:, 1:]], 1)
            else:
                y = torch.cat([y[:, :1], beta * context + (1 - beta) * y[:, 1:1 + n], y[:, 1 + n:]], 1)
            counter += 1
        if index >= REP_LAYERS[0]:
            mask = torch.full((y.shape[1], y.shape[1]), float("-inf")).triu_(1)
        y = block(y, attn_mask=mask)
    text = clip.ln_final(y)[torch.arange(y.shape[0]), tokenized.argmax(-1) + n] @ clip.text_projection
    image, rep, text = norm(image), norm(rep), norm(text)
    return 100.0 * image @ text.t(), 100.0 * rep @ text.t(), image, text


def their_loss(clip, logits, logits_rep, image, text, images, classnames, labels, alpha, reg, template):
    """MMRLpp_Loss against the zero-shot CLIP's features of the same images and the same hand-written prompts.
    Returns (CE, CE_rep, 1 - mean cos image, 1 - mean cos text, total)."""
    image_clip = norm(clip.encode_image(images))
    text_clip = norm(clip.encode_text(tokenize([template.format(n.replace("_", " ")) for n in classnames])))
    ce, ce_rep = F.cross_entropy(logits, labels), F.cross_entropy(logits_rep, labels)
    reg_img = 1 - torch.mean(F.cosine_similarity(image, image_clip, dim=1))
    reg_txt = 1 - torch.mean(F.cosine_similarity(text, text_clip, dim=1))
    return ce, ce_rep, reg_img, reg_txt, alpha * ce + (1 - alpha) * ce_rep + reg * reg_img + reg * reg_txt


def _leaf(tensor):
    return tensor.detach().clone().requires_grad_(True)


def theirs_from(ours):
    """Their parameters from ours: bank, each tower's (W, [A_i], [B_i], [bias_i]), proj's A and B."""
    def srra(aligners):
        return (_leaf(aligners.weight), [_leaf(a) for a in aligners.a], [_leaf(b) for b in aligners.b],
                [_leaf(b) for b in aligners.bias])
    return [_leaf(ours.bank), srra(ours.vision_aligners), srra(ours.text_aligners), _leaf(ours.projection_a),
            _leaf(ours.projection_b)]


def _trained_like(ours):
    """B_i and proj's B start at zero (so A's gradient is zero): give them values, as after some training."""
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for b in [*ours.vision_aligners.b, *ours.text_aligners.b, ours.projection_b]:
            b.copy_(torch.randn(b.shape, generator=generator) * 0.05)


def _pairs(ours, theirs):
    """(our tensor, their tensor) of every learnable part."""
    pairs = [(ours.bank, theirs[0]), (ours.projection_a, theirs[3]), (ours.projection_b, theirs[4])]
    for aligners, their in ((ours.vision_aligners, theirs[1]), (ours.text_aligners, theirs[2])):
        pairs.append((aligners.weight, their[0]))
        for mine, theirs_list in zip((aligners.a, aligners.b, aligners.bias), their[1:]):
            pairs += list(zip(mine, theirs_list))
    return pairs


# --- parity on a batch -------------------------------------------------------------------------

def test_mmrlpp_matches_their_code_on_a_batch(clip, batch):
    images, labels = batch
    run = recipe("mmrlpp", dataset="oxford_pets", demo=False, start_layer=2)
    assert (run.beta, run.reg_weight, run.alpha, run.logit_scale, run.template) == \
        (0.7, 0.01, 0.7, 100.0, "a photo of a {}, a type of pet.")  # trainers/config.py: OxfordPets, B2N
    ours = create("mmrlpp", Backbone(clip), run, seed=5)
    _trained_like(ours)
    theirs = theirs_from(ours)
    prefix = ours.image_prefix(images)
    step = ours.step(prefix, labels, BASE, ours.frozen_image(prefix))  # as the trainer calls it
    logits, logits_rep, image, text = their_mmrlpp(clip, theirs, BASE, images, 0.7, run.template)
    ce, ce_rep, reg_img, reg_txt, loss = their_loss(clip, logits, logits_rep, image, text, images, BASE, labels,
                                                    0.7, 0.01, run.template)
    torch.testing.assert_close(step.logits, 0.7 * logits + 0.3 * logits_rep, **TOL)  # logits_fusion
    for term, expected in (("cls", ce), ("attr", ce_rep), ("img", reg_img), ("txt", reg_txt)):
        torch.testing.assert_close(step.terms[term], expected, **TOL)
    assert min(float(reg_img.detach()), float(reg_txt.detach())) > 0  # both regularizers are in play
    torch.testing.assert_close(step.total, loss, **TOL)
    step.total.backward()
    loss.backward()
    for mine, their in _pairs(ours, theirs):
        scale = float(their.grad.abs().max())
        assert scale > 0  # every learnable tensor gets a gradient: A_i too, B_i being non-zero
        torch.testing.assert_close(mine.grad, their.grad, rtol=1e-4, atol=1e-5 * scale)
    with torch.no_grad():  # test (B2N): base classes fused, novel classes the CLS logits alone
        for classes, seen in ((BASE, True), (NOVEL, False)):
            streams = ours.logits(ours.encode(prefix), classes)
            logits, logits_rep, _, _ = their_mmrlpp(clip, theirs, classes, images, 0.7, run.template)
            expected = 0.7 * logits + 0.3 * logits_rep if seen else logits
            torch.testing.assert_close(ours.output(streams, ours.alpha, seen, "cls"), expected, **TOL)


def test_a_transfer_target_is_scored_with_its_own_beta(clip, batch):
    """cross_datasets_test.sh builds the model under the target's config (TASK CD: DescribableTextures BETA 0.5)
    and loads the ImageNet tensors into it: the target's CLS logits use its BETA, not the source's 0.9."""
    images, _ = batch
    params = load_params(PAPER)
    run = recipe("mmrlpp", dataset="imagenet", protocol="transfer", demo=False, start_layer=2)
    ours = create("mmrlpp", Backbone(clip), run, seed=2)
    _trained_like(ours)
    theirs = theirs_from(ours)
    target = params.train.recipe("mmrlpp", "dtd", "transfer")
    assert (run.beta, run.reg_weight, target.beta) == (0.9, 0.1, 0.5)
    with torch.no_grad():
        source = ours.logits(ours.encode(ours.image_prefix(images)), NOVEL, "{} texture.")[:, 0]
        ours.for_dataset(target)
        scored = ours.logits(ours.encode(ours.image_prefix(images)), NOVEL, "{} texture.")[:, 0]
        torch.testing.assert_close(scored, their_mmrlpp(clip, theirs, NOVEL, images, 0.5, "{} texture.")[0], **TOL)
        assert not torch.allclose(scored, source)  # the cached class features were dropped with the old BETA
        ours.for_dataset(run)
        torch.testing.assert_close(ours.logits(ours.encode(ours.image_prefix(images)), NOVEL, "{} texture.")[:, 0],
                                   source)


def test_evaluate_hands_each_dataset_its_recipe():
    """`dear evaluate` gives the model its own recipe on its own dataset, a target's in the transfer protocol."""
    params = load_params(PAPER)
    own = params.train.recipe("mmrlpp", "imagenet", "transfer")

    class Model:
        name, recipe = "mmrlpp", own

    assert evaluate_stage._recipe_at(params, Model, "imagenet") is own
    betas = {target: evaluate_stage._recipe_at(params, Model, target).beta for target in CD_BETA}
    assert betas == CD_BETA


# --- their parts, by hand -------------------------------------------------------------------------

def test_trainable_parts_and_their_init(clip):
    ours = create("mmrlpp", Backbone(clip), recipe("mmrlpp", demo=False, start_layer=2), seed=1)
    trainable = {name: tuple(p.shape) for name, p in ours.named_parameters() if p.requires_grad}
    rank, d = 4, ours.recipe.rep_dim  # RES_LORA_DIM; REP_DIM (the tests' small bank: 16)
    expected = {"bank": (5, d), "projection_a": (64, 64), "projection_b": (64, 32)}  # PROJ_LORA_DIM 64: A [D, 64]
    for tower, width in (("vision_aligners", 64), ("text_aligners", 64)):
        expected[f"{tower}.weight"] = (width, d)
        for i in range(2):  # REP_LAYERS 2-3 of each tower
            expected |= {f"{tower}.a.{i}": (width, rank), f"{tower}.b.{i}": (rank, d), f"{tower}.bias.{i}": (width,)}
    assert trainable == expected
    assert abs(float(ours.bank.detach().std()) - 0.02) < 0.003  # nn.init.normal_(compound_rep_tokens, std=0.02)
    for aligners in (ours.vision_aligners, ours.text_aligners):
        assert all(torch.equal(b, aligners.bias[0]) for b in aligners.bias)  # every bias: the shared Linear's
        assert all(not b.detach().any() for b in aligners.b)  # B zeros
        a = torch.stack([a.detach() for a in aligners.a])  # kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(rank), ...)
        assert float(a.abs().max()) <= 1 / math.sqrt(rank) and float(a.abs().max()) > 0.8 / math.sqrt(rank)
        bound = 1 / math.sqrt(d)  # nn.Linear(REP_DIM, D)'s weight and bias: U(-1/sqrt(REP_DIM), ...)
        assert float(aligners.weight.detach().abs().max()) <= bound and float(aligners.bias[0].detach().abs().max()) <= bound
    assert float(ours.projection_a.detach().abs().max()) <= 1 / 8  # fan_in 64
    assert torch.equal(ours.rep_projection().detach(), clip.visual.proj.detach())  # proj + A 0 = proj


def test_progressive_composition_by_hand(clip):
    ours = create("mmrlpp", Backbone(clip), recipe("mmrlpp", demo=False, start_layer=2, beta=0.7))
    torch.testing.assert_close(ours.composed(torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])),
                               torch.tensor([0.7 * 1 + 0.3 * 10, 0.7 * 2 + 0.3 * 20]))  # [3.7, 7.4]
    with torch.no_grad():
        first = ours._vision_tokens(2, None)  # the first token layer: the aligned tokens alone
        torch.testing.assert_close(first[0], ours.vision_aligners[0](ours.bank))
        previous = torch.ones(2, 5, 64)
        later = ours._vision_tokens(3, previous)
        torch.testing.assert_close(later, 0.7 * ours.vision_aligners[1](ours.bank)[None] + 0.3 * previous)


# --- Dassl's learning rate of every epoch -------------------------------------------------------------

@pytest.mark.parametrize("config,dataset,protocol,shots,expected", [
    ("paper", "oxford_pets", "base_to_novel", None, (1e-3, 10, 1)),  # vit_b16.yaml
    ("paper", "imagenet", "base_to_novel", None, (1e-3, 5, 1)),  # vit_b16_imagenet.yaml
    ("paper", "imagenet", "transfer", None, (1e-3, 1, 0)),  # vit_b16_cross_datasets.yaml
    ("fewshot", "eurosat", "few_shot", 4, (2e-3, 100, 1)),  # vit_b16_few_shot.yaml
    ("fewshot", "imagenet", "few_shot", 16, (1e-3, 5, 1)),  # few_shot.sh: imagenet runs vit_b16_imagenet
])
def test_learning_rate_of_every_epoch_is_dassls(config, dataset, protocol, shots, expected):
    run = load_params(CONFIGS[config]).train.recipe("mmrlpp", dataset, protocol, shots)
    assert (run.lr, run.epochs, run.warmup_epochs) == expected
    ours = our_epoch_lrs(run, steps_per_epoch=3)
    assert ours == pytest.approx([dassl_lr(e, run.lr, run.epochs, run.warmup_epochs, run.warmup_lr)
                                  for e in range(1, run.epochs + 1)], rel=1e-12)
    if run.warmup_epochs:
        assert ours[:2] == [1e-5, run.lr]


# --- the paper and few-shot configs are their recipes ---------------------------------------------------

PAPER = fake_run.ROOT / "configs/paper-vitb16.yaml"
CONFIGS = {"paper": PAPER, "fewshot": fake_run.ROOT / "configs/fewshot-vitb16.yaml"}
DASSL = {"momentum": 0.9, "weight_decay": 5e-4, "flip_prob": 0.5, "views": None,
         "min_steps": None}  # Dassl trains exactly its epochs: no minimum of steps on the built-in datasets
MMRLPP = {"crop_scale": [0.5, 1.0], "interpolation": "bicubic", "optimizer": "adamw", "schedule": "cosine",
          "warmup_lr": 1e-5, "alpha": 0.7, "tokens": 5, "start_layer": 6, "precision": "amp", "rep_dim": 512,
          "projection_rank": 64, "aligner_rank": 4, "logit_scale": 100.0, "fade_in_epochs": 0.0}
CONFIG_FILES = {  # configs/trainers/MMRLpp/<file>.yaml: (BATCH_SIZE, LR, MAX_EPOCH, WARMUP_EPOCH, BETA, REG_WEIGHT)
    "vit_b16": (4, 1e-3, 10, 1, 0.9, 1.0), "vit_b16_imagenet": (32, 1e-3, 5, 1, 0.9, 1.0),
    "vit_b16_cross_datasets": (32, 1e-3, 1, 0, 0.9, 0.2), "vit_b16_few_shot": (32, 2e-3, 100, 1, 0.9, 1.0)}
B2N_FS = {  # trainers/config.py, trainer MMRLpp, task B2N or FS: (BETA, REG_WEIGHT)
    "imagenet": (0.9, 0.2), "fgvc_aircraft": (0.9, 2.0), "ucf101": (0.9, 3.0), "dtd": (0.9, 7.0),
    "oxford_pets": (0.7, 0.01), "stanford_cars": (0.7, 6.0), "caltech-101": (0.6, 3.0), "sun397": (0.5, 3.0),
    "oxford_flowers": (0.4, 7.0), "eurosat": (0.2, 0.01), "food-101": (0.1, 1.0)}
CD_BETA = {  # trainers/config.py, trainer MMRLpp, task CD: BETA (ImageNet also REG_WEIGHT 0.1)
    "imagenet": 0.9, "imagenetv2": 0.9, "imagenet-rendition": 0.9, "imagenet-adversarial": 0.8,
    "imagenet-sketch": 0.7, "fgvc_aircraft": 0.9, "ucf101": 0.9, "sun397": 0.7, "oxford_pets": 0.6,
    "caltech-101": 0.6, "dtd": 0.5, "oxford_flowers": 0.4, "stanford_cars": 0.3, "eurosat": 0.3, "food-101": 0.3}
TEMPLATES = {  # trainers/mmrlpp.py CUSTOM_TEMPLATES (the others: "a photo of a {}.")
    "oxford_pets": "a photo of a {}, a type of pet.", "oxford_flowers": "a photo of a {}, a type of flower.",
    "fgvc_aircraft": "a photo of a {}, a type of aircraft.", "dtd": "{} texture.",
    "eurosat": "a centered satellite photo of {}.", "food-101": "a photo of {}, a type of food.",
    "ucf101": "a photo of a person doing {}."}


def theirs(config_file: str, dataset: str, beta: float, reg: float) -> dict:
    """Dassl's defaults, the config file, then trainers/config.py's values for the dataset and task."""
    batch, lr, epochs, warmup, _, _ = CONFIG_FILES[config_file]
    return {**DASSL, **MMRLPP, "batch_size": batch, "lr": lr, "epochs": epochs, "warmup_epochs": warmup,
            "beta": beta, "reg_weight": reg, "template": TEMPLATES.get(dataset, "a photo of a {}.")}


def test_the_paper_config_trains_mmrlpp_exactly_as_their_configs():
    """base2new_train.sh: vit_b16 (ImageNet: vit_b16_imagenet) + the B2N table; cross_datasets_train.sh:
    vit_b16_cross_datasets + the CD table's ImageNet (BETA 0.9, REG_WEIGHT 0.1, merged after the file's 0.2)."""
    params = load_params(PAPER)
    assert params.train.recipes == {} and "mmrlpp" in params.study.methods
    for dataset in params.study.base_to_novel:
        run = params.train.recipe("mmrlpp", dataset, "base_to_novel")
        expected = theirs("vit_b16_imagenet" if dataset == "imagenet" else "vit_b16", dataset, *B2N_FS[dataset])
        assert run.values == expected, dataset
        assert all(s.kind == "authors" for s in run.settings.values()), dataset
    source = params.train.recipe("mmrlpp", params.study.transfer.source, "transfer")
    assert source.values == theirs("vit_b16_cross_datasets", "imagenet", 0.9, 0.1)
    assert all(s.kind == "authors" for s in source.settings.values())


def test_every_transfer_target_is_scored_with_its_cd_beta():
    params = load_params(PAPER)
    targets = [params.study.transfer.source, *params.study.transfer.cross_dataset,
               *params.study.transfer.domain_generalization]
    assert sorted(targets) == sorted(CD_BETA)
    for target in targets:
        run = params.train.recipe("mmrlpp", target, "transfer")
        assert run.beta == CD_BETA[target] and run.settings["beta"].kind == "authors", target


def test_the_few_shot_config_trains_mmrlpp_exactly_as_their_few_shot_script():
    """few_shot.sh: vit_b16_few_shot (ImageNet: vit_b16_imagenet) at shots 1, 2, 4, 8, 16 + the FS table."""
    params = load_params(CONFIGS["fewshot"])
    assert "mmrlpp" in params.study.methods
    for dataset in params.study.few_shot.datasets:
        for shots in (1, 2, 4, 8, 16):
            run = params.train.recipe("mmrlpp", dataset, "few_shot", shots)
            expected = theirs("vit_b16_imagenet" if dataset == "imagenet" else "vit_b16_few_shot", dataset,
                              *B2N_FS[dataset])
            assert run.values == expected, (dataset, shots)
            assert all(s.kind == "authors" for s in run.settings.values()), (dataset, shots)


def test_the_recipe_files_values_are_their_files():
    """The recipe file's layers against the config files' numbers (CONFIG_FILES), read from the file itself."""
    spec = yaml.safe_load((fake_run.ROOT / "dear/methods/recipes/mmrlpp.yaml").read_text())
    layers = [*spec["recipe"], *spec["datasets"]["imagenet"], *spec["transfer"]["recipe"],
              *spec["few_shot"]["recipe"]]
    for layer in layers:
        name = next((f for f in CONFIG_FILES if f"configs/trainers/MMRLpp/{f}.yaml " in layer["source"] + " "), None)
        if name is None:
            continue
        assert "yunncheng/MMRL@208ba96 " in layer["source"]
        values = layer["values"]
        got = (values["batch_size"], values["lr"], values["epochs"], values["warmup_epochs"], values["beta"],
               values["reg_weight"])
        assert got == CONFIG_FILES[name], name


# --- through the commands: a target of `dear evaluate` gets its BETA ---------------------------------------

def test_dear_evaluate_scores_each_transfer_target_with_its_beta(tmp_path, monkeypatch):
    from tests.fake_coop import make_fake_dataset
    from tests.fake_run import invoke, prepared_project

    root = tmp_path
    params = prepared_project(root, {"mmrlpp": {"datasets": {"world_objects_b": {"beta": 0.3}}}})
    raw = yaml.safe_load(params.read_text())
    make_fake_dataset(root / "raw", "world_objects_b", n_classes=3, per_class=2)
    raw["data"]["datasets"] = ["world_objects", "world_objects_b"]
    raw["study"]["transfer"] = {"source": "world_objects", "cross_dataset": ["world_objects_b"],
                                "domain_generalization": []}
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    invoke("prepare", "--params", params, "--dataset", "world_objects_b", "--out", root / "data/world_objects_b")
    run = root / "transfer/mmrlpp/seed1"
    invoke("train", "--params", params, "--method", "mmrlpp", "--dataset", "world_objects", "--classes", "all",
           "--seed", 1, "--backbone", root / "backbone", "--fewshot", root / "data/world_objects/fewshot-seed1.parquet",
           "--out", run, "--checkpoint", root / "ckpt.pt")
    from dear.methods import mmrlpp

    seen = []
    original = mmrlpp.MMRLpp.for_dataset
    monkeypatch.setattr(mmrlpp.MMRLpp, "for_dataset",
                        lambda self, r: (seen.append((r.dataset, r.beta)), original(self, r))[1])
    fusion = tmp_path / "fusion.json"
    fusion.write_text('{"alpha": [0.7, 0.3]}')
    invoke("evaluate", "--params", params, "--model", run / "model.pt", "--fusion", fusion,
           "--source", root / "data/world_objects", "--classes", "all", "--data", root / "data",
           "--backbone", root / "backbone", "--out", tmp_path / "eval")
    assert seen == [("world_objects", 0.9), ("world_objects_b", 0.3)]
    assert (tmp_path / "eval/eval.parquet").is_file()
