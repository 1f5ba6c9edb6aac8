"""CoCoOp (KaiyangZhou/CoOp, trainers/cocoop.py): CoOp's context, shifted per image by a meta-network.

Learnable parts (its PromptLearner): CoOp's context [M, D] (`dear.methods.coop`:
the word embeddings of ctx_init, "a photo of a": M = 4) and the meta-net
Linear(E -> E // 16) -> ReLU -> Linear(E // 16 -> D), PyTorch's default init.
Their code derives the widths from the backbone: E is `visual.output_dim` (the
joint embedding width), D is `ln_final`'s (the text width); ViT-B/16: 512 ->
32 -> 512. Under fp16 their meta-net is half like the context
(`meta_net.half()`; here `Precision.prepare` halves every learnable tensor).
Forward, in training and at test alike: the frozen CLIP's normalized image
feature goes through the meta-net, and its output is added to every context
vector, so each image has its own prompts "<ctx + meta(x)> <name>." for all
classes: the text tower runs once per image and class (B x C prompts). Loss:
the cross-entropy of CLIP's logit scale times the cosine.
What is computed once: the prompts' token embeddings per class list; the image
tower is frozen, so the frozen-prefix cache (view bank, evaluation) holds all
of it. Evaluation passes thousands of images at once: they go through the text
tower in chunks of at most `PROMPTS_PER_PASS` prompts. The text pass is the
whole cost, so prompts of similar length go through it together, each group
cut after its own last end-of-text (`LENGTH_GROUPS`; exact, as nothing reads
past a prompt's end-of-text under the causal mask): a quarter fewer token
rows on the embedded world's class names.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from dear.errors import DearError
from dear.methods import towers
from dear.methods.coop import CoOp
from dear.model import internals as oc


class CoCoOp(CoOp):
    REDUCTION = 16  # the meta-net's hidden width: vis_dim // 16
    PROMPTS_PER_PASS = 4096  # image x class prompts per text-tower pass (bounds evaluation's memory)
    LENGTH_GROUPS = 3  # prompts of similar length per text pass (3: 0.73 of the padded token rows on world_objects)

    def build(self, roles) -> None:
        super().build(roles)  # the context [M, D]
        width = oc.image_projection(self.clip).shape[1]  # E, their vis_dim
        hidden = width // self.REDUCTION
        self.meta_net = nn.Sequential(OrderedDict([
            ("linear1", nn.Linear(width, hidden)), ("relu", nn.ReLU()), ("linear2", nn.Linear(hidden, self.text.width))]))

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        raise DearError("cocoop: class features depend on the image (the meta-net shifts the context); "
                        "use logits(features, classnames)")

    def logits(self, features: torch.Tensor, classnames: list[str], template: str | None = None) -> torch.Tensor:
        """[B, 1, E] normalized image features -> [B, 1, C]: each image scored with its own prompts."""
        groups = self._prompt_groups(classnames)
        images = max(1, self.PROMPTS_PER_PASS // len(classnames))
        chunks = [self._conditioned_logits(features[i:i + images, 0], groups)
                  for i in range(0, features.shape[0], images)]
        return torch.cat(chunks)[:, None]

    def _prompt_groups(self, classnames: list[str]) -> tuple[torch.Tensor, list[towers.TextInput]]:
        """The class list's prompts in groups of similar length, each trimmed after its own last end-of-text,
        and the order that puts the groups' classes back in the list's order (computed once per class list)."""
        def grouped():
            prompt = self.prompt_input(classnames)
            by_length = prompt.pool.argsort()
            groups = []
            for index in torch.tensor_split(by_length, min(self.LENGTH_GROUPS, len(classnames))):
                end = int(prompt.pool[index].max()) + 1
                groups.append(towers.TextInput(prompt.tokens[index, :end], prompt.embeddings[index, :end],
                                               prompt.pool[index]))
            return by_length.argsort(), groups
        return self.once(("prompt-groups", tuple(classnames)), grouped)

    def _conditioned_logits(self, image: torch.Tensor, groups) -> torch.Tensor:
        """[b, E] normalized image features x their own class prompts -> [b, C]."""
        restore, prompts = groups
        shift = self.meta_net(image.to(self.meta_net.linear1.weight.dtype))  # [b, D]
        context = self.context[None] + shift[:, None]  # [b, M, D]
        text = torch.cat([self._text_pass(prompt, context) for prompt in prompts], 1)[:, restore]  # [b, C, E]
        return self.logit_scale().float() * torch.einsum("be,bce->bc", image.float(), text.float())

    def _text_pass(self, prompt: towers.TextInput, context: torch.Tensor) -> torch.Tensor:
        """The c prompts of `prompt` [c, T, D] with each image's context [b, M, D] -> class features [b, c, E]."""
        b, (c, T, D) = context.shape[0], prompt.embeddings.shape
        embeddings = towers.prompt_embeddings(prompt.embeddings.expand(b, c, T, D), context)  # [b, c, T, D]
        x = towers.with_positions(self.clip, embeddings).flatten(0, 1)  # [b*c, T, D]
        return towers.run_text(self.clip, self.text, x, prompt.pool.repeat(b), group=c).unflatten(0, (b, c))


MODELS = {"cocoop": CoCoOp}
