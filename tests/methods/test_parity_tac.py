"""Parity with TAC's code (FushengHao/TAC@563e7db), written out in the tests.

The project holds none of the authors' code. The references below restate,
step by step and with open_clip's own modules (blocks called as modules, not
`dear.model.internals`), what their code computes: VLPromptLearner (the class
descriptions' features, their k-means clusters by kmeans_pytorch, the prompt
"[SOT] clusters context <ctx_init> <class>." and its truncated suffix),
CustomCLIP and TextEncoder (trainers/tac.py), the IVLP blocks and the
VisionTransformer with its cluster tokens, visual_mask and output dropout
(clip/model.py), the loss of TAC.forward_backward and its mean over the
epochs' states (ep_model_weights 1/N). From the same parameters on the same
batch of a small CLIP the project's model must give the same training
logits, each loss term, the total, the gradient of every learnable tensor,
and the base and novel test logits; the recipe of every paper-config job
must be their configs' (configs/trainers/TAC/basetonovel.yaml,
crossdatasets.yaml over train.py's extend_cfg and Dassl's defaults).
"""

import math

import pytest
import torch
import torch.nn.functional as F
import yaml

from dear.errors import DearError
from dear.methods import create, prompts
from dear.methods.tac import kmeans_cosine
from dear.config.params import load_params
from tests import fake_run
from tests.methods_tools import Backbone, norm, recipe, tokenize
from tests.methods.test_parity import dassl_lr, our_epoch_lrs
from tests.tiny_clip import tiny_clip

BASE = ["sea_lion", "golden_retriever", "red car"]
NOVEL = ["tree", "hot_dog"]
TOL = dict(rtol=1e-4, atol=1e-5)
TINY = dict(vision_depth=3, text_depth=2, n_ctx=2, n_ctx_vision=3, clusters=2,  # 3 image, 2 text layers; 16 positions
            descriptions="templates", k_transforms=1, return_img0=False)  # one view: the trainer gives each its own


@pytest.fixture(scope="module")
def clip():
    """Text width = embedding width (32), as ViT-B/16's 512 = 512: their VPT_topk_t is Linear(E, E)."""
    return tiny_clip(seed=3, text_width=32)


def build(clip, seed=5, **changes):
    return create("tac", Backbone(clip), recipe("tac", demo=False, **{**TINY, **changes}), seed=seed)


# --- their forward ---------------------------------------------------------------------------

def their_fixed_embeddings(clip, classnames, texts_of):
    """VLPromptLearner: per class encode_text of its descriptions, mean(dim=0) of the unnormalized features,
    then the [C, E] matrix normalized (clip_weights = fixed_embeddings)."""
    weights = [clip.encode_text(tokenize(texts_of(name.replace("_", " ")))).mean(dim=0, keepdim=True)
               for name in classnames]
    weights = torch.cat(weights, dim=0)
    return weights / weights.norm(dim=-1, keepdim=True)


def their_text(clip, ctx, topk_t, text_deep, classnames):
    """VLPromptLearner.forward + TextEncoder: [SOS, topk, ctx, suffix] with suffix = embedding[:, 1:-n_ctx-k],
    at IVLP blocks 1..depth-1 prefix x[:1], topk, this layer's VPT_shallow, x[1 + k + n_ctx:]; EOT + n_ctx + k."""
    k, n = topk_t.shape[0], ctx.shape[0]
    names = [name.replace("_", " ") for name in classnames]
    tokenized = tokenize([f"a photo of a {name}." for name in names])  # prompt_prefix + " " + name + "."
    embedding = clip.token_embedding(tokenized)
    C = len(names)
    x = torch.cat([embedding[:, :1], topk_t.expand(C, -1, -1), ctx.expand(C, -1, -1), embedding[:, 1:-n - k]], 1)
    x = x + clip.positional_embedding
    for i, block in enumerate(clip.transformer.resblocks):
        if 1 <= i <= len(text_deep):
            x = torch.cat([x[:, :1], topk_t.expand(C, -1, -1), text_deep[i - 1].expand(C, -1, -1), x[:, 1 + k + n:]], 1)
        x = block(x, attn_mask=clip.attn_mask)
    return clip.ln_final(x)[torch.arange(C), tokenized.argmax(-1) + n + k] @ clip.text_projection


def their_image(clip, vpt, topk_v, images):
    """VisionTransformer: topk after the positional embeddings, then VPT, ln_pre; blocks 1..depth-1 drop the last
    n_ctx + k outputs and append topk and their VPT_shallow; visual_mask: the patch rows never read topk."""
    visual, k, n = clip.visual, topk_v.shape[0], vpt.shape[1]
    x = visual.conv1(images)
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    x = torch.cat([visual.class_embedding + torch.zeros(x.shape[0], 1, x.shape[-1]), x], 1)
    x = x + visual.positional_embedding
    n_img = x.shape[1] - 1
    x = torch.cat([x, topk_v.expand(x.shape[0], -1, -1), vpt[0].expand(x.shape[0], -1, -1)], 1)
    x = visual.ln_pre(x)
    mask = torch.zeros(x.shape[1], x.shape[1])
    mask[1:1 + n_img, 1 + n_img:1 + n_img + k] = float("-inf")
    for i, block in enumerate(visual.transformer.resblocks):
        if 1 <= i < vpt.shape[0]:
            x = torch.cat([x[:, :x.shape[1] - n - k], topk_v.expand(x.shape[0], -1, -1),
                           vpt[i].expand(x.shape[0], -1, -1)], 1)
        x = block(x, attn_mask=mask)
    return visual.ln_post(x[:, 0]) @ visual.proj  # then self.dropout (p = 0.3), active in train mode


def their_forward(clip, parts, topk, classnames, images, dropout=0.0):
    """CustomCLIP.forward: (logits, normalized text features, normalized image features, zero-shot features)."""
    ctx, vpt, text_deep, topk_t_layer, topk_v_layer = parts
    text = norm(their_text(clip, ctx, topk_t_layer(topk), text_deep, classnames))
    image = norm(F.dropout(their_image(clip, vpt, topk_v_layer(topk), images), dropout))
    zero_shot = norm(F.dropout(clip.encode_image(images), dropout))  # ZS_image_encoder: the same dropout
    return clip.logit_scale.exp() * image @ text.t(), text, image, zero_shot


def their_loss(logits, text, image, zero_shot, fixed, labels):
    """forward_backward (fp16 branch): CE + 20 L1(text, fixed_embeddings) + 25 L1(image, zero-shot)."""
    ce = F.cross_entropy(logits, labels)
    text_term = F.l1_loss(text, fixed, reduction="mean") * 20
    image_term = F.l1_loss(image, zero_shot, reduction="mean") * 25
    return ce, text_term, image_term, ce + (text_term + image_term)


def _linear(layer):
    clone = torch.nn.Linear(layer.in_features, layer.out_features)
    clone.load_state_dict(layer.state_dict())
    return clone


def theirs_from(ours):
    """Their parameters from ours: ctx, [VPT, VPT_shallow of image blocks], [VPT_shallow of text blocks],
    VPT_topk_t, VPT_topk_v."""
    leaf = lambda p: p.detach().clone().requires_grad_(True)  # noqa: E731
    return [leaf(ours.context), leaf(ours.vision_prompts), leaf(ours.text_prompts), _linear(ours.cluster_text),
            _linear(ours.cluster_image)]


def _their_params(theirs):
    return [theirs[0], theirs[1], theirs[2], *theirs[3].parameters(), *theirs[4].parameters()]


def _our_params(ours):
    return [ours.context, ours.vision_prompts, ours.text_prompts, *ours.cluster_text.parameters(),
            *ours.cluster_image.parameters()]


# --- parity on a batch -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["eval", "train"])
def test_tac_matches_their_code_on_a_batch(clip, batch, mode):
    """eval: no dropout; train: their dropout on both image features, the same masks drawn from the same seed."""
    images, labels = batch
    ours = build(clip)
    ours.cluster(BASE)
    theirs = theirs_from(ours)
    ours.train(mode == "train")
    dropout = 0.3 if mode == "train" else 0.0
    prefix = ours.image_prefix(images)
    frozen = ours.frozen_image(prefix)
    torch.manual_seed(4)
    step = ours.step(prefix, labels, BASE, frozen)  # as the trainer calls it
    torch.manual_seed(4)
    logits, text, image, zero_shot = their_forward(clip, theirs, ours.centres, BASE, images, dropout)
    fixed = their_fixed_embeddings(clip, BASE, lambda name: [t.format(name) for t in ours.recipe.templates])
    ce, text_term, image_term, loss = their_loss(logits, text, image, zero_shot, fixed, labels)
    torch.testing.assert_close(step.logits, logits, **TOL)
    torch.testing.assert_close(step.terms["ce"], ce, **TOL)
    torch.testing.assert_close(20.0 * step.terms["txt"], text_term, **TOL)
    torch.testing.assert_close(25.0 * step.terms["img"], image_term, **TOL)
    torch.testing.assert_close(step.total, loss, **TOL)
    assert min(float(text_term.detach()), float(image_term.detach())) > 0  # every term is in play
    step.total.backward()
    loss.backward()
    for mine, their in zip(_our_params(ours), _their_params(theirs)):
        scale = float(their.grad.abs().max())
        assert scale > 0
        torch.testing.assert_close(mine.grad, their.grad, rtol=1e-4, atol=1e-5 * scale)
    ours.eval()
    with torch.no_grad():  # test: base and novel classes, the training classes' clusters, no dropout
        for classes in (BASE, NOVEL):
            mine = ours.logits(ours.encode(ours.image_prefix(images)), classes)
            torch.testing.assert_close(ours.output(mine, ours.alpha, classes is BASE, "cls"),
                                       their_forward(clip, theirs, ours.centres, classes, images)[0], **TOL)


def test_k_views_and_img0_are_their_forward_backward(clip, batch):
    """Their parse_batch_train and forward_backward at K_TRANSFORMS 2, RETURN_IMG0: the views view-major, the labels
    repeated, the zero-shot feature of img0 dropped out once per image and then .repeat(k_transforms, 1)."""
    images, labels = batch
    views = torch.cat([images, images.flip(-1)])  # torch.cat(batch["img"]): view 0 of every image, then view 1
    img0 = images.roll(1, dims=-2)
    ours = build(clip, k_transforms=2, return_img0=True)
    ours.cluster(BASE)
    theirs = theirs_from(ours)
    ours.train()
    frozen = ours.frozen_image(ours.image_prefix(img0)).repeat(2, 1)  # the trainer's (`Views`)
    torch.manual_seed(4)
    step = ours.step(ours.image_prefix(views), labels.repeat(2), BASE, frozen)
    torch.manual_seed(4)
    ctx, vpt, text_deep, topk_t_layer, topk_v_layer = theirs
    text = norm(their_text(clip, ctx, topk_t_layer(ours.centres), text_deep, BASE))
    image = norm(F.dropout(their_image(clip, vpt, topk_v_layer(ours.centres), views), 0.3))
    zero_shot = norm(F.dropout(clip.encode_image(img0), 0.3)).repeat(2, 1)  # ZS_image_encoder(img_o), then repeat
    fixed = their_fixed_embeddings(clip, BASE, lambda name: [t.format(name) for t in ours.recipe.templates])
    *_, loss = their_loss(clip.logit_scale.exp() * image @ text.t(), text, image, zero_shot, fixed, labels.repeat(2))
    torch.testing.assert_close(step.total, loss, **TOL)
    torch.testing.assert_close(25.0 * step.terms["img"], F.l1_loss(image, zero_shot) * 25, **TOL)


def test_the_description_features_are_their_fixed_embeddings(clip):
    texts = ["a photo of a {}.", "a sketch of the {}.", "itap of a {}."]
    ours = build(clip, templates=texts)
    expected = their_fixed_embeddings(clip, BASE, lambda name: [t.format(name) for t in texts])
    torch.testing.assert_close(ours.descriptions(BASE), expected, **TOL)


# --- the clustering step -----------------------------------------------------------------------

def their_kmeans(x, k, indices, tol=1e-4):
    """kmeans_pytorch.kmeans(X, k, distance='cosine') from the initial rows `indices`: pairwise_cosine (points
    normalized, elementwise product summed), argmin, each centre the mean of its members, until the squared
    sum of the centres' shifts is below tol."""
    x = x.float()
    state = x[indices].clone()
    while True:
        a, b = x.unsqueeze(1), state.unsqueeze(0)
        distance = 1 - ((a / a.norm(dim=-1, keepdim=True)) * (b / b.norm(dim=-1, keepdim=True))).sum(-1).squeeze()
        choice = torch.argmin(distance, dim=1)
        before = state.clone()
        for index in range(k):
            selected = torch.index_select(x, 0, torch.nonzero(choice == index).squeeze())
            state[index] = selected.mean(dim=0)
        if torch.sum(torch.sqrt(torch.sum((state - before) ** 2, dim=1))) ** 2 < tol:
            return state


def test_kmeans_by_hand():
    """Two groups of two points: from any two distinct rows, the centres end at the groups' means."""
    x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    for seed in range(6):
        centres = kmeans_cosine(x, 2, torch.Generator().manual_seed(seed))
        got = [value for centre in sorted(centres.tolist()) for value in centre]
        assert got == pytest.approx([0.05, 0.95, 0.95, 0.05], abs=1e-6), seed


def test_kmeans_is_theirs_from_the_same_start():
    generator = torch.Generator().manual_seed(0)
    x = F.normalize(torch.randn(40, 8, generator=generator), dim=-1)  # fixed_embeddings: normalized rows
    for seed in range(5):
        start = torch.randperm(40, generator=torch.Generator().manual_seed(seed))[:5]  # np.random.choice's role
        ours = kmeans_cosine(x, 5, torch.Generator().manual_seed(seed))
        torch.testing.assert_close(ours, their_kmeans(x, 5, start), rtol=1e-5, atol=1e-6)


def test_the_clusters_are_the_training_classes_and_travel_with_the_model(clip):
    ours = build(clip, clusters=5)
    with pytest.raises(DearError, match="no task clusters yet"):
        ours.text_features(BASE)
    ours.cluster(BASE[:2])  # fewer classes than clusters: one per class (ours; their k-means fails)
    assert ours.centres.shape == (2, 32)
    ours.cluster(BASE)
    assert ours.centres.shape == (3, 32)
    torch.testing.assert_close(ours.centres.norm(dim=-1), torch.ones(3))  # normalized after k-means
    loaded = build(clip, clusters=5)
    loaded.load_trainable(ours.trainable_state(), "test")
    assert torch.equal(loaded.centres, ours.centres)


# --- their parts, by hand -------------------------------------------------------------------------

def test_the_prompt_and_the_context_start(clip):
    prompt = prompts.with_clusters("a photo of a", 5, 5, "golden_retriever")
    assert (prompt.text, prompt.shown) == ("a photo of a golden retriever.",
                                           "[SOT] [K1..K5 X1..X5] a photo of a golden retriever.")
    assert prompts.with_clusters("a photo of a", 21, 5, "dog").text == " ".join(["X"] * 21) + " dog."  # n_ctx > 20
    ids = tokenize(["a photo of a"])[0]
    assert ids[5] == 49407 and ids[6] == 0  # after "a photo of a": end-of-text, then padding
    for n_ctx in (2, 5, 7):  # the first n_ctx embeddings after SOT: the fifth is EOT's, then the padding's
        ours = build(clip, n_ctx=n_ctx)
        torch.testing.assert_close(ours.context.detach(), clip.token_embedding(ids[None])[0, 1:1 + n_ctx].detach())


def test_which_tensors_train_and_their_init(clip):
    ours = build(clip, seed=1)
    trainable = {name: tuple(p.shape) for name, p in ours.named_parameters() if p.requires_grad}
    # theirs: prompt_learner.ctx, image_encoder.VPT and the VPT_shallow of image blocks 1-2 and text block 1,
    # VPT_topk_t Linear(E, E) and VPT_topk_v Linear(E, D_v); the clusters (topk) are frozen
    assert trainable == {"context": (2, 32), "text_prompts": (1, 2, 32), "vision_prompts": (3, 3, 64),
                         "cluster_text.weight": (32, 32), "cluster_text.bias": (32,),
                         "cluster_image.weight": (64, 32), "cluster_image.bias": (64,)}
    deep = torch.cat([ours.vision_prompts.detach().flatten(), ours.text_prompts.detach().flatten()])
    assert abs(float(deep.std()) - 0.02) < 0.006  # nn.init.normal_(ctx_vectors, std=0.02)


def test_the_patches_never_read_the_cluster_tokens(clip):
    ours = build(clip)
    ours.cluster(BASE)
    mask = ours._masks(5, torch.device("cpu"))[1]  # CLS and 4 patches, 2 clusters, 3 prompts
    blocked = (mask == float("-inf")).nonzero().tolist()
    assert blocked == [[row, col] for row in range(1, 5) for col in (5, 6)] and mask.shape == (10, 10)
    assert set(ours._masks(5, torch.device("cpu"))) == {1, 2, 3}  # every layer


def test_the_model_is_the_mean_of_the_epochs_states(clip):
    """ep_model_weights = ones(N) / N: after epochs with the context at 1, 2 and 6 it is 3."""
    ours = build(clip, epochs=3)
    for epoch, value in ((1, 1.0), (2, 2.0), (3, 6.0)):
        with torch.no_grad():
            ours.context.fill_(value)
        ours.on_epoch_end(epoch, 3)
    torch.testing.assert_close(ours.context.detach(), torch.full_like(ours.context, 3.0))


def test_a_depth_past_the_towers_or_a_prompt_past_the_positions_is_one_line(clip, batch):
    for changes, key in (({"vision_depth": 4}, "vision_depth = 4"), ({"text_depth": 3}, "text_depth = 3"),
                         ({"text_depth": 0}, "text_depth = 0")):
        with pytest.raises(DearError, match=key) as error:
            build(clip, **changes)
        assert "\n" not in str(error.value) and f"train.recipes.tac.{key.split()[0]}" in str(error.value)
    ours = build(clip, n_ctx=8)  # 8 vectors + 2 clusters + "a photo of a golden retriever." > 16 positions
    ours.cluster(BASE)
    with pytest.raises(DearError, match="train.recipes.tac.n_ctx"):
        ours.text_features(BASE)


# --- Dassl's learning rate of every epoch, and the paper config --------------------------------------

PAPER = fake_run.ROOT / "configs/paper-vitb16.yaml"
DASSL = {"momentum": 0.9, "weight_decay": 5e-4, "flip_prob": 0.5, "views": None,
         "min_steps": None}  # Dassl trains exactly its epochs: no minimum of steps on the built-in datasets
THEIRS = {  # train.py extend_cfg, then configs/trainers/TAC/<file>.yaml, over Dassl's defaults
    "base_to_novel": {**DASSL, "batch_size": 8, "crop_scale": [0.4, 1.0], "interpolation": "bicubic",
                      "optimizer": "sgd", "lr": 0.0025, "epochs": 20, "schedule": "cosine", "warmup_epochs": 1,
                      "warmup_lr": 1e-5, "n_ctx_vision": 5, "n_ctx": 5, "ctx_init": "a photo of a",
                      "precision": "fp16", "vision_depth": 12, "text_depth": 12, "text_loss_weight": 20.0,
                      "image_loss_weight": 25.0, "clusters": 5, "feature_dropout": 0.3, "k_transforms": 4,
                      "return_img0": True},
}
FILES = {  # trainers/tac.py dataset_name_mapping: the descriptions file of each dataset
    "imagenet": "imagenet", "caltech-101": "caltech", "oxford_pets": "oxford_pets", "stanford_cars": "stanford_cars",
    "oxford_flowers": "oxford_flowers", "food-101": "food101", "fgvc_aircraft": "fgvc", "sun397": "sun397",
    "dtd": "dtd", "eurosat": "eurosat", "ucf101": "ucf101"}
OURS = ("templates", "descriptions_dir")  # the option's texts and where their files are fetched to
THEIRS["transfer"] = {**THEIRS["base_to_novel"], "crop_scale": [0.8, 1.0], "epochs": 5, "n_ctx_vision": 10,
                      "n_ctx": 10}


@pytest.mark.parametrize("protocol,epochs", [("base_to_novel", 20), ("transfer", 5)])
def test_learning_rate_of_every_epoch_is_dassls(protocol, epochs):
    run = load_params(PAPER).train.recipe("tac", "imagenet", protocol)
    ours = our_epoch_lrs(run, steps_per_epoch=3)
    assert ours == pytest.approx([dassl_lr(e, 0.0025, epochs, 1, 1e-5) for e in range(1, epochs + 1)], rel=1e-12)
    assert ours[:2] == [1e-5, 0.0025] and ours[-1] == pytest.approx(0.0025 * (1 + math.cos(math.pi * (epochs - 2)
                                                                                             / epochs)) / 2)


def test_the_paper_config_trains_tac_exactly_as_their_configs():
    """One config for every dataset (base2new_train.sh: CFG basetonovel; xd_train.sh: crossdatasets), their 4 views
    and img0, and each dataset's own descriptions file; ours: only the templates option and where files go."""
    params = load_params(PAPER)
    assert params.train.recipes == {} and "tac" in params.study.methods
    jobs = [(d, "base_to_novel") for d in params.study.base_to_novel] + [(params.study.transfer.source, "transfer")]
    for dataset, protocol in jobs:
        run = params.train.recipe("tac", dataset, protocol)
        values = {key: value for key, value in run.values.items() if key not in OURS}
        assert values == {**THEIRS[protocol], "descriptions": f"{FILES[dataset]}_prompt.json"}, (dataset, protocol)
        assert all(s.kind == "authors" for k, s in run.settings.items() if k not in OURS), (dataset, protocol)
        assert all(run.settings[key].kind == "ours" for key in OURS) and len(run.templates) == 60


def test_their_descriptions_file_gives_their_fixed_embeddings(clip, tmp_path):
    """A file of their format written here ({class name as the prompt writes it: [texts]}, counts differing per
    class): per class the mean of its texts' unnormalized features, normalized ("sea_lion" -> "sea lion")."""
    import json

    texts = {"sea lion": ["A sea lion has flippers.", "a photo of a sea lion."], "golden retriever": ["A dog."],
             "red car": ["A red car on a road.", "a car", "itap of a red car."], "unused": ["never read"]}
    path = tmp_path / "toy_prompt.json"
    path.write_text(json.dumps(texts))
    ours = build(clip, descriptions=str(path))
    expected = their_fixed_embeddings(clip, BASE, lambda name: texts[name])
    torch.testing.assert_close(ours.descriptions(BASE), expected, **TOL)
    assert not torch.allclose(build(clip).descriptions(BASE), expected, atol=1e-3)  # not the templates option


def test_the_recipe_file_names_their_commit_in_every_authors_source():
    spec = yaml.safe_load((fake_run.ROOT / "dear/methods/recipes/tac.yaml").read_text())
    for layer in [*spec["recipe"], *spec["transfer"]]:
        if layer.get("kind", "authors") == "authors":
            assert layer["source"].startswith("FushengHao/TAC@563e7db "), layer["source"]


# --- through the commands ---------------------------------------------------------------------------

def test_dear_train_clusters_the_base_classes_and_evaluate_scores_novel_ones_with_them(tmp_path):
    from tests.fake_run import invoke, prepared_project
    from dear.methods.trained import read_trained

    root = tmp_path
    params = prepared_project(root, {"tac": {"vision_depth": 2, "text_depth": 2}})
    run = root / "runs/tac/world_objects/seed1"
    invoke("train", "--params", params, "--method", "tac", "--dataset", "world_objects", "--seed", 1,
           "--backbone", root / "backbone", "--fewshot", root / "data/world_objects/fewshot-seed1.parquet",
           "--out", run, "--checkpoint", root / "ckpt.pt")
    state = read_trained(run / "model.pt")["state"]
    assert state["centres"].shape[0] == 2  # the fake dataset's 2 base classes (fewer than the 5 clusters)
    fusion = tmp_path / "fusion.json"
    fusion.write_text('{"alpha": [1.0]}')
    invoke("evaluate", "--params", params, "--model", run / "model.pt", "--fusion", fusion,
           "--source", root / "data/world_objects", "--classes", "base", "--data", root / "data",
           "--backbone", root / "backbone", "--out", tmp_path / "eval")
    import json

    metrics = json.loads((tmp_path / "eval/metrics.json").read_text())
    assert set(metrics["base_to_novel"]["world_objects"]) == {"base", "novel", "hm"}


def test_fp16_keeps_the_prompts_in_fp32_and_the_context_and_cluster_projections_in_half(batch):
    """Theirs under PREC fp16: ctx from the fp16 token embedding and VPT_topk_t/v (`.half()`) are half, the
    VPT and VPT_shallow prompts fp32 cast to half where they enter. Run on the CPU with the CUDA path forced."""
    from dear.compute.device import Precision
    from dear.methods.base import in_precision

    images, labels = batch
    clip = tiny_clip(seed=3, text_width=32)
    model = create("tac", Backbone(clip), recipe("tac", demo=False, **TINY))
    precision = Precision("fp16", torch.device("cpu"))
    precision.active = True
    in_precision(model, precision)
    halves = [model.context, *model.cluster_text.parameters(), *model.cluster_image.parameters()]
    assert all(p.dtype == torch.float16 for p in halves)
    assert model.vision_prompts.dtype == torch.float32 and model.text_prompts.dtype == torch.float32
    step = model.step(model.image_prefix(images), labels, BASE)
    step.total.backward()
    assert model.context.grad.dtype == torch.float16 and model.vision_prompts.grad.dtype == torch.float32
    assert all(torch.isfinite(p.grad).all() for p in [*halves, model.vision_prompts, model.text_prompts])
    assert model.descriptions(BASE).dtype == torch.float32  # their fixed_embeddings: an fp32 CLIP's
