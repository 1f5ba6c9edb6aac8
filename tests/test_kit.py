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
}


@pytest.mark.parametrize("check", BROKEN)
def test_the_kit_names_the_promise_a_broken_method_breaks(tmp_path, check):
    body, words = BROKEN[check]
    with installed_plugin(tmp_path / "site", f"broken_{check}", model_body=body, trains=True) as name:
        kit = Kit(name, tmp_path / "study")
        with pytest.raises(AssertionError, match=words):
            getattr(kit, check)()
