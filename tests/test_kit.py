"""dear.testing, the kit a method's author runs: every built-in method passes it, and it catches broken methods.

The built-in methods' own tests are this kit (docs/your-method.md#testing), so what a plugin's author checks
cannot drift from what `dear` checks of its own. Each broken method below breaks one promise and must be
named by the check that guards it.
"""

import pytest
import torch
from torch import nn

from dear.methods import names
from dear.testing import Kit
from tests.plugins import installed_plugin


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return tmp_path_factory.mktemp("kit")


@pytest.mark.parametrize("method", names())
def test_every_built_in_method_passes_the_kit(study, method):
    Kit(method, study).check()


BROKEN = {  # check -> (the method's body, words of the failure it must report)
    "check_gradients": ('''
    def build(self, roles):
        self.scale = nn.Parameter(torch.ones(()))
        self.clip.visual.proj.requires_grad_(True)  # a frozen weight made learnable
''', "the frozen CLIP's weights are learnable"),
    "check_save_load": ('''
    def build(self, roles):
        self.scale = nn.Parameter(torch.ones(()))
        self.register_buffer("offset", torch.zeros(()))

    def on_epoch_end(self, epoch, epochs):
        self.offset += 1.0  # state model.pt never stores (no extra_state)

    def encode(self, prefix):
        return super().encode(prefix) * self.scale + self.offset
''', "gives other logits than the model training saved"),
    "check_resume": ('''
    def build(self, roles):
        self.scale = nn.Parameter(torch.ones(()))

    def encode(self, prefix):
        noise = torch.randn((), generator=torch.Generator().manual_seed(int(time.time_ns() % 1000)))
        return super().encode(prefix) * (self.scale + 1e-3 * noise)  # a draw no seed decides
''', "differ"),
    "check_blocks": ('''
    def build(self, roles):
        self.prompts = nn.Parameter(torch.zeros(2, self.vision.width))  # tokens entering image layer 1

    def encode(self, prefix):  # frozen_depth forgotten: the prefix has run every block already
        from dear.contract import internals

        rows = towers.run_image(self.vision, prefix, 1, lambda layer, previous: self.prompts[None],
                                range(1, self.vision.layers + 1), append_at=1)
        return torch.nn.functional.normalize(internals.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]
''', "image block 1 runs 2 times per image between image_prefix and encode .frozen_depth is 2.*set the property "
     "frozen_depth"),
    "check_layers": ('''
    def build(self, roles):
        from dear.contract import check_layer

        self.depth = check_layer(12, self.vision.layers, "prompt_depth_vision")  # ViT-B/16's depth, not the kit's
        self.scale = nn.Parameter(torch.ones(()))
''', "recipe key prompt_depth_vision names a layer outside the kit's backbone .2 layers a tower.; give the kit one"),
    "check_zero_effect": ('''
    def build(self, roles):
        self.shift = nn.Parameter(torch.zeros(()))

    def zero_effect(self):
        self.shift.fill_(0.5)  # not the value without effect (0)
        return True

    def encode(self, prefix):
        return torch.nn.functional.normalize(super().encode(prefix) + self.shift, dim=-1)
''', "with zero_effect.. its image features differ from zero-shot CLIP's"),
}


@pytest.mark.parametrize("check", BROKEN)
def test_the_kit_names_the_promise_a_broken_method_breaks(tmp_path, check):
    body, words = BROKEN[check]
    with installed_plugin(tmp_path / "site", f"broken_{check}", model_body=body, trains=True) as name:
        kit = Kit(name, tmp_path / "study")
        with pytest.raises(AssertionError, match=words):
            getattr(kit, check)()


def test_a_method_that_forgets_frozen_depth_fails_the_kit_in_one_line(tmp_path):
    body, _ = BROKEN["check_blocks"]
    with installed_plugin(tmp_path / "site", "forgot_depth", model_body=body, trains=True) as name:
        with pytest.raises(AssertionError) as raised:
            Kit(name, tmp_path / "study").check()
    said = str(raised.value)
    assert "\n" not in said and said.startswith(f"method {name} fails dear.testing's check_blocks: image block 1 "
                                                 "runs 2 times per image"), said


def test_the_kit_says_a_layer_that_does_not_fit_alone_and_a_method_without_a_zero_effect_passes(tmp_path):
    """A recipe outside the kit's towers fails every check: `check` says that one line only. A method whose
    zero-effect values are right passes (one declaring none is not asked: every built-in method)."""
    body, _ = BROKEN["check_layers"]
    with installed_plugin(tmp_path / "site", "too_deep", model_body=body, trains=True) as name:
        with pytest.raises(AssertionError) as raised:
            Kit(name, tmp_path / "study").check()
    assert "\n" not in str(raised.value) and "fails dear.testing's check_layers" in str(raised.value)
    right = BROKEN["check_zero_effect"][0].replace("fill_(0.5)", "fill_(0.0)")
    with installed_plugin(tmp_path / "site", "right_zero", model_body=right, trains=True) as name:
        Kit(name, tmp_path / "study").check_zero_effect()
