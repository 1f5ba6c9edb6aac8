"""The `+roles` variants: each its plain method, with DeAR's Generalization heads isolated from what it learns.

Isolation, checked for every variant as for DeAR (SPEC §5) and failing on a one-entry mistake of its mask or of its
head slices (`test_a_one_entry_bug_is_caught`):
- a closed head's output is bit-identical to the frozen model's wherever its inputs are (its rows of the image
  positions: the tokens' values change nothing; the frozen block on the image positions alone gives the same bits);
- its attention weight on every learnable token is exactly 0, and no gradient reaches a token through it;
- CLIP-LoRA+roles: its q, k, v slices are the frozen ones, bit for bit, and its slice of every B gets no gradient.
Heads per layer of MIXED_ROLES: 0 attribute (color), 1 attribute (object), 2 generalization, 3 mixed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dear.errors import DearError
from dear.methods import entry
from dear.model import head_roles, internals
from dear.model.masks import HeadRole
from tests.floats import assert_same_up_to_rounding
from tests.methods_tools import MIXED_ROLES, build, layer_roles
from tests.tiny_clip import tiny_clip

TOKEN_VARIANTS = ["maple+roles", "promptsrc+roles", "mmrl+roles"]
VARIANTS = [*TOKEN_VARIANTS, "clip_lora+roles"]
CLOSED = [2]  # the generalization head of MIXED_ROLES (mixed_heads: open, the default)
OPEN = [0, 1, 3]


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


@pytest.fixture(scope="module")
def images():
    torch.manual_seed(3)
    return torch.randn(2, 3, 32, 32)


def trained_like(model):
    """The model with every learnable tensor moved off its init (LoRA's B starts at zero: no update to see)."""
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.5)
    return model


def image_blocks(model, images, monkeypatch):
    """(block, its input x [B, T, D], its mask) of every image block the model's forward runs."""
    calls, original = [], internals.block_forward
    blocks = set(map(id, model.vision.blocks))

    def spy(block, x, mask=None, rows=None):
        if id(block) in blocks:
            calls.append((block, x.detach(), mask))
        return original(block, x, mask, rows)

    monkeypatch.setattr(internals, "block_forward", spy)
    with torch.no_grad():
        model.encode(model.image_prefix(images))
    monkeypatch.setattr(internals, "block_forward", original)
    return calls


def attention_weights(block, x, mask):
    """[B, H, T, T] softmax weights of one block's heads on x [B, T, D] under an additive mask [H, T, T]."""
    q, k, _ = internals._qkv(block, x)
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return (logits + (0 if mask is None else mask)).softmax(-1)


def token_isolation_problems(model, images, monkeypatch, closed=CLOSED) -> list[str]:
    """What breaks a closed head's isolation from the tokens, in every image layer holding them."""
    n_other = model.image_prefix(images).shape[1]
    found = []
    for layer, (block, x, mask) in enumerate(image_blocks(model, images, monkeypatch), start=1):
        if x.shape[1] == n_other:
            continue  # no token in this layer
        weights = attention_weights(block, x, mask)  # [B, H, T, T]
        outputs = internals.head_outputs(block, x, mask)[:, :, :n_other]  # [B, H, 1+N, d]
        frozen = internals.head_outputs(block, x[:, :n_other])  # the frozen block on the image positions alone
        other = torch.cat([x[:, :n_other], torch.randn_like(x[:, n_other:]) * 10], 1)  # other token values
        moved = internals.head_outputs(block, other, mask)[:, :, :n_other]
        tokens = x[:, n_other:].clone().requires_grad_()
        through = internals.head_outputs(block, torch.cat([x[:, :n_other], tokens], 1), mask)[:, closed, :n_other]
        (gradient,) = torch.autograd.grad(through.sum(), tokens)
        for head in closed:
            if (weights[:, head, :n_other, n_other:] != 0).any():
                found.append(f"layer {layer} head {head}: an image position weighs a token")
            if not torch.equal(outputs[:, head], frozen[:, head]):
                found.append(f"layer {layer} head {head}: output differs from the frozen model's")
            if not torch.equal(moved[:, head], outputs[:, head]):
                found.append(f"layer {layer} head {head}: output moves with the tokens")
        if (gradient != 0).any():
            found.append(f"layer {layer}: a gradient reaches a token through a closed head")
    return found


@pytest.mark.parametrize("name", TOKEN_VARIANTS)
def test_a_closed_head_is_isolated_from_the_tokens_and_an_open_one_reads_them(clip, images, name, monkeypatch):
    model = trained_like(build(clip, name, MIXED_ROLES))
    assert token_isolation_problems(model, images, monkeypatch) == []
    n_other = model.image_prefix(images).shape[1]
    block, x, mask = image_blocks(model, images, monkeypatch)[-1]
    weights = attention_weights(block, x, mask)
    for head in OPEN:  # attribute heads of a core concept and mixed heads read every token
        assert (weights[:, head, :n_other, n_other:] > 0).all()
    assert token_isolation_problems(model, images, monkeypatch, closed=OPEN)  # the check sees a head that reads


def lora_isolation_problems(model, images, closed=CLOSED) -> list[str]:
    """What breaks a closed head's isolation from CLIP-LoRA's updates, in every adapted image layer."""
    found = []
    x = model.image_prefix(images)  # frozen prefix: the input of the first adapted layer
    updates = model._updates(model.vision, model.image_layers, model.image_updates)
    d = model.vision.head_dim
    for layer in model.image_layers:
        block = model.vision.blocks[layer - 1]
        frozen_q = internals._qkv(block, x)
        frozen_heads = internals.head_outputs(block, x)
        with internals.low_rank_qkv(updates):
            adapted_q = internals._qkv(block, x)
            adapted_heads = internals.head_outputs(block, x)
        for head in closed:
            if any(not torch.equal(a[:, head], f[:, head]) for a, f in zip(adapted_q, frozen_q)):
                found.append(f"layer {layer} head {head}: q, k or v differs from the frozen weights'")
            if not torch.equal(adapted_heads[:, head], frozen_heads[:, head]):
                found.append(f"layer {layer} head {head}: output differs from the frozen model's")
        with internals.low_rank_qkv(updates):
            x = internals.block_forward(block, x)
    model.zero_grad()
    step = model.step(model.image_prefix(images), torch.tensor([0, 1]), ["dog", "red car", "tree"])
    step.total.backward()
    for layer, update in zip(model.image_layers, model.image_updates):
        for m, b in update.update.b.items():
            for head in closed:
                if b.grad is not None and (b.grad[head * d:(head + 1) * d] != 0).any():
                    found.append(f"layer {layer} head {head}: a gradient reaches its slice of B_{m}")
    return found


def test_clip_lora_roles_never_changes_a_closed_heads_weights(clip, images):
    model = trained_like(build(clip, "clip_lora+roles", MIXED_ROLES, dropout=0.0))
    with torch.no_grad():
        for update in model.image_updates:
            for head in CLOSED:  # as trained: a closed slice of B never moves off zero
                d = model.vision.head_dim
                for b in update.update.b.values():
                    b[head * d:(head + 1) * d] = 0.0
    assert lora_isolation_problems(model, images) == []
    assert lora_isolation_problems(model, images, closed=OPEN)  # the open heads' q, k, v and outputs do change


def test_a_closed_slice_of_b_stays_zero_through_training_steps(clip, images):
    model = build(clip, "clip_lora+roles", MIXED_ROLES)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1, weight_decay=0.01)
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        model.step(model.image_prefix(images), torch.tensor([0, 2]), ["dog", "red car", "tree"]).total.backward()
        optimizer.step()
    d = model.vision.head_dim
    for update in model.image_updates:
        for b in update.update.b.values():
            assert (b[2 * d:3 * d] == 0).all() and (b[: 2 * d] != 0).any()


def flipped(original, head: int, query: int, key_from_end: int):
    """`token_masks` with one entry of one head opened: the one-entry bug the isolation tests must catch."""
    def token_masks(*args, **kwargs):
        masks = original(*args, **kwargs)
        for mask in masks.values():
            mask[head, query, mask.shape[-1] - key_from_end] = 0.0
        return masks
    return token_masks


@pytest.mark.parametrize("name", TOKEN_VARIANTS)
@pytest.mark.parametrize("query,key_from_end", [(0, 1), (1, 2)])  # CLS -> last token, a patch -> another token
def test_a_one_entry_mask_bug_is_caught(clip, images, name, query, key_from_end, monkeypatch):
    monkeypatch.setattr(head_roles, "token_masks", flipped(head_roles.token_masks, 2, query, key_from_end))
    model = trained_like(build(clip, name, MIXED_ROLES))
    problems = token_isolation_problems(model, images, monkeypatch)
    assert any("weighs a token" in line for line in problems) and any("moves with" in line for line in problems)


def test_a_one_entry_lora_slice_bug_is_caught(clip, images):
    model = trained_like(build(clip, "clip_lora+roles", MIXED_ROLES, dropout=0.0))
    update = model.image_updates[0]
    update.rows[2 * model.vision.head_dim] = 1.0  # one row of the closed head's q slice opened
    problems = lora_isolation_problems(model, images)
    assert any("q, k or v differs" in line for line in problems) and any("gradient" in line for line in problems)


@pytest.mark.parametrize("name", VARIANTS)
def test_with_every_head_closed_the_image_feature_is_the_frozen_clips(clip, images, name):
    roles = layer_roles([("generalization", "other")] * 4)
    model = trained_like(build(clip, name, roles))
    prefix = model.image_prefix(images)
    with torch.no_grad():
        assert_same_up_to_rounding(model.encode(prefix)[:, 0], F.normalize(clip.encode_image(images), dim=-1))
        plain = trained_like(build(clip, entry(name).plain, roles))
        assert not torch.allclose(plain.encode(plain.image_prefix(images))[:, 0], model.encode(prefix)[:, 0],
                                  atol=1e-4)


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_starts_as_its_plain_method_from_the_same_seed(clip, name):
    variant, plain = build(clip, name, MIXED_ROLES, seed=4), build(clip, entry(name).plain, MIXED_ROLES, seed=4)
    ours = {key.replace(".update.", "."): value for key, value in variant.trainable_state().items()}
    theirs = plain.trainable_state()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
    recipe, plain_recipe = variant.recipe.values, plain.recipe.values
    assert {k: v for k, v in recipe.items() if k in plain_recipe} == plain_recipe
    assert set(recipe) - set(plain_recipe) == {"generalization_heads", "attribute_heads", "mixed_heads",
                                               "role_concepts", "roles_table"}


def test_mixed_heads_closed_closes_mixed_and_unprofiled_heads():
    roles = [HeadRole(1, 0, "attribute", "color"), HeadRole(1, 1, "attribute", "emotion"),
             HeadRole(1, 2, "generalization", "other"), HeadRole(1, 3, "mixed", None)]
    core = ["color", "shape"]
    assert head_roles.head_kinds(roles, core, "open", 1, 4) == ["open", "closed", "closed", "open"]
    assert head_roles.head_kinds(roles, core, "closed", 1, 4) == ["open", "closed", "closed", "closed"]
    assert head_roles.head_kinds(roles, core, "open", 2, 2) == ["open", "open"]  # layer 2: not profiled
    assert head_roles.head_kinds(roles, core, "closed", 2, 2) == ["closed", "closed"]
    assert head_roles.adapted_heads(roles, core, "closed", 1, 4).tolist() == [True, False, False, False]


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_without_roles_is_a_one_line_error(clip, name):
    with pytest.raises(DearError, match=rf"--roles: method {name.replace('+', '[+]')} needs the roles table"):
        build(clip, name, None)


def test_a_variant_s_recipe_records_the_study_s_roles_and_dear_recipe_shows_every_source(tmp_path):
    """The method's own values and sources, then SPEC's for the roles and the mask, then the study's roles table and
    thresholds (profile.dataset, profile.roles); `train.recipes.roles` changes the rule, a wrong key is one line."""
    import yaml

    from dear.methods.recipe import problems
    from dear.config.show import as_text
    from dear.config.params import load_params
    from tests.methods_tools import demo_recipes

    raw = yaml.safe_load(open("configs/demo-roles.yaml"))
    raw["profile"]["roles"].update(mode="absolute", low=1.0, high=2.0)
    raw["train"]["recipes"]["roles"] = {"mixed_heads": "closed"}
    (tmp_path / "roles.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    params = load_params(tmp_path / "roles.yaml")
    recipe = params.train.recipe("maple+roles", "world_objects", "base_to_novel")
    plain = params.train.recipe("maple", "world_objects", "base_to_novel")
    assert {key: recipe.settings[key] for key in plain.settings} == plain.settings  # the method's own, as they are
    assert recipe.settings["mixed_heads"].source == "train.recipes.roles.mixed_heads" and recipe.mixed_heads == "closed"
    assert recipe.roles_table == "demo-roles/roles/world_objects/roles.parquet"
    assert recipe.roles_threshold == "Concept Entropy H <= 1.0 attribute, H >= 2.0 generalization bits"
    assert recipe.settings["roles_threshold"].source.startswith("profile.roles")
    shown = as_text(params, [recipe], "roles.yaml")
    assert "maple+roles on world_objects (base-to-novel): MaPLe" in shown and "+ DeAR's head roles" in shown
    assert 'generalization_heads  "closed"                 paper: SPEC §5' in shown
    assert "role_concepts" in shown and "paper: SPEC §3" in shown and "ours: profile.dataset" in shown
    assert problems({**demo_recipes(), "roles": {"mixed_head": "open"}}) == [
        "train.recipes.roles.mixed_head: unknown recipe key; remove it or fix its spelling (did you mean mixed_heads?)"]
    assert problems({**demo_recipes(), "roles": {"mixed_heads": "half"}}) == [
        "train.recipes.roles.mixed_heads: must be one of open | closed, got 'half'"]


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_job_s_code_is_its_plain_method_s_its_module_and_the_roles_nothing_else(name):
    """An edit of another method's module replans no variant job; an edit of the roles' code no plain method's."""
    from dear.pipeline import jobs

    plain = entry(name).plain
    files, plain_files = set(jobs.code("train", name).files), set(jobs.code("train", plain).files)
    own = {f"dear/methods/{plain}.py", f"dear/methods/{plain}_roles.py", "dear/methods/roles.py",
           "dear/model/head_roles.py", "dear/methods/recipes/roles.yaml"}
    variant_only = {f"dear/methods/{plain}_roles.py", "dear/methods/roles.py", "dear/methods/recipes/roles.yaml"}
    assert own <= files and not variant_only & plain_files  # (head_roles: in every job that imports dear.contract)
    others = {f"dear/methods/{other}{suffix}.py" for other in ("maple", "promptsrc", "mmrl", "clip_lora")
              if other != plain for suffix in ("", "_roles")}
    assert not others & files, sorted(others & files)
