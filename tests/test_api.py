"""The public surface has no traps (issue 30, item 4): one layer numbering, strict recipe overrides, no silent zero loss."""

import pytest
import torch

from dear.errors import DearError
from dear.methods.recipe import resolve
from dear.model import internals
from dear.model.masks import head_mask
from tests import methods_tools as mt
from tests.tiny_clip import tiny_clip


def test_encode_image_numbers_mask_layers_from_one():
    model = tiny_clip()
    images = torch.randn(2, 3, 32, 32)
    T, H = 1 + 16, 4
    blocked = torch.stack([head_mask("generalization", None, T - 1, 1)] * H)  # the last position reads only itself
    reference = internals.image_tokens(model, images)
    blocks = internals.vision_tower(model).blocks
    expected = internals.block_forward(blocks[0], reference, blocked)  # mask on layer 1 = the first block
    for block in blocks[1:]:
        expected = internals.block_forward(block, expected)
    torch.testing.assert_close(internals.encode_image(model, images, {1: blocked}),
                               internals.image_embedding(model, expected[:, 0]))
    with pytest.raises(DearError, match="layer 0 is outside this image tower's layers 1..3"):
        internals.encode_image(model, images, {0: blocked})


def test_misspelt_recipe_override_raises():
    with pytest.raises(DearError, match=r"train.recipes.mmrl.rep_dimm: recipe 'mmrl' has no such key.*rep_dim"):
        resolve({"mmrl": {"rep_dimm": 8}}, "mmrl", "world_objects", "base_to_novel")
    with pytest.raises(DearError, match=r"train.recipes.mmrl.datasets.eurosat.reg_weigth"):
        resolve({"mmrl": {"datasets": {"eurosat": {"reg_weigth": 0.1}}}}, "mmrl", "eurosat", "base_to_novel")
    with pytest.raises(DearError, match=r"train.recipes.all.epoch: unknown recipe key.*epochs"):
        resolve({"all": {"epoch": 2}}, "coop", "world_objects", "base_to_novel")
    # a shared key another recipe has is not this recipe's business
    assert resolve({"all": {"rep_dim": 16}}, "coop", "world_objects", "base_to_novel").get("rep_dim") is None


@pytest.mark.parametrize("name", ["mmrl", "dear_nomask"])
def test_step_without_frozen_image_computes_the_image_term(clip, name):
    model = mt.build(clip, name, reg_weight=0.5)
    images = torch.randn(4, 3, 32, 32)
    prefix = model.image_prefix(images)
    labels = torch.tensor([0, 1, 2, 0])
    torch.manual_seed(0)
    given = model.step(prefix, labels, mt.CLASSES, model.frozen_image(prefix))
    torch.manual_seed(0)
    alone = model.step(prefix, labels, mt.CLASSES)
    assert given.terms["img"] > 0
    torch.testing.assert_close(alone.terms["img"], given.terms["img"])
    torch.testing.assert_close(alone.total, given.total)
