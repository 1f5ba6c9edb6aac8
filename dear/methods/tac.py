"""TAC, task-aware clustering (FushengHao/TAC@563e7db: trainers/tac.py, clip/model.py, configs/trainers/TAC/) as its
authors train it, using only names `dear.contract` exports, imported from where they live (and
`dear.methods.descriptions`, which reads their texts).

PromptSRC's independent deep prompts in both towers (IVLP), led by tokens of the task's clusters:
- clusters (VLPromptLearner.__init__, once, on the training classes): each class's frozen-CLIP feature is the
  mean of its descriptions' unnormalized text features, normalized (`fixed_embeddings` [C, E], fp32);
  k-means with cosine distance (kmeans_pytorch's `kmeans(X, 5, distance='cosine')`: k distinct classes as
  the first centres, each class to its nearest centre by cosine, each centre the mean of its members, an
  empty one restarted at a random class, until the squared sum of the centres' shifts is below 1e-4)
  gives `clusters` centres, normalized (`topk`), fixed for the run: the trained state keeps them, so a test
  on other classes uses the training classes' centres (their load_model restores `topk`);
- text: "[SOT] K_1..K_k X_1..X_n <ctx_init> <class>." where K = Linear(E -> D_t)(centres) (VPT_topk_t) and X the
  n_ctx context vectors, the token embeddings of the first n_ctx tokens after start-of-text of ctx_init
  ("a photo of a": with n_ctx 5 the fifth is end-of-text, past it padding), the words kept in the prompt;
  at text layers 2..text_depth the K enter again and N(0, 0.02) deep prompts replace the X; end-of-text
  moves by k + n_ctx;
- image: after the patches K' = Linear(E -> D_v)(centres) (VPT_topk_v) and n_ctx_vision N(0, 0.02) prompts,
  appended before ln_pre (a per-token norm: the same appended to the frozen prefix through ln_pre), both
  entering again at layers 2..vision_depth; at every layer the patches do not read the K' (their
  visual_mask); the image feature is CLS -> ln_post -> proj, dropped out (p = `feature_dropout`) while
  training, as is the frozen CLIP's (the same VisionTransformer);
- loss (TAC.forward_backward): CE(CLIP's logit scale x cos) + text_loss_weight L1(class features,
  fixed_embeddings) + image_loss_weight L1(image features, the frozen CLIP's image features);
- after each epoch the learnable tensors enter a mean over the epochs (ep_model_weights: 1/N each, the
  weighting of PromptSRC's GPA), which replaces them after the last (`averaging.EpochAverage`).
The descriptions (`descriptions`): their descriptions/<dataset>_prompt.json, read from a checkout of their
repository or fetched by `dear fetch-weights` (dear.methods.descriptions), or PromptSRC's 60 templates as an
explicit option (ours: the embedded world has no descriptions of theirs). The views: the trainer gives each
image `k_transforms` augmented views and the frozen feature of the unaugmented image (`return_img0`), as their
loader (dear.train.data.Views). Ours (docs/method.md): the k-means start drawn with the run's seed (theirs:
numpy's global state), an iteration cap, and k = the number of classes when there are fewer (their k-means fails).
Precision fp16: the context and the cluster projections are half, the prompts fp32 cast where they enter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dear.errors import DearError
from dear.methods import averaging, prompts, towers
from dear.methods.base import MethodModel, Step, cross_entropy
from dear.model import internals
from dear.methods import descriptions

AVERAGE = "mean."  # prefix of the running sums in the extra state (model.pt, checkpoints)
KMEANS_TOL = 1e-4  # kmeans_pytorch's default tol on the squared sum of centre shifts
KMEANS_LIMIT = 1000  # ours: theirs iterates until the tolerance, with no cap (iter_limit=0)


class TAC(MethodModel):
    TERMS = ("ce", "txt", "img")
    needs_frozen_image = True
    INIT_STD = 0.02  # nn.init.normal_(ctx_vectors, std=0.02)

    def build(self, roles) -> None:
        r = self.recipe
        self.vision_depth = _depth(r.vision_depth, self.vision.layers, "vision_depth", "image")
        self.text_depth = _depth(r.text_depth, self.text.layers, "text_depth", "text")
        embed = internals.image_projection(self.clip).shape[1]  # E
        self.context = nn.Parameter(self._initial_context())  # [n_ctx, D_t]
        self.text_prompts = nn.Parameter(torch.randn(self.text_depth - 1, r.n_ctx, self.text.width) * self.INIT_STD)
        shape = (self.vision_depth, r.n_ctx_vision, self.vision.width)
        self.vision_prompts = nn.Parameter(torch.randn(shape) * self.INIT_STD)  # layer l: row l - 1
        self.cluster_text = nn.Linear(embed, self.text.width)  # VPT_topk_t (theirs E -> E: E = D_t on ViT-B/16)
        self.cluster_image = nn.Linear(embed, self.vision.width)  # VPT_topk_v
        self.cluster_seed = int(torch.randint(2**31 - 1, ()))  # the k-means start, from the run's seed
        self.register_buffer("centres", torch.zeros(0, embed), persistent=False)  # [k, E] once clustered
        self.average = averaging.EpochAverage([1.0 / r.epochs] * r.epochs, self._learnable())

    def _initial_context(self) -> torch.Tensor:
        """The token embeddings of the first n_ctx tokens after start-of-text of ctx_init (their `ctx_init and
        n_ctx <= 20`: end-of-text and padding included), else N(0, 0.02) vectors."""
        r = self.recipe
        if not r.ctx_init or r.n_ctx > prompts.CLUSTER_WORD_INIT:
            return torch.randn(r.n_ctx, self.text.width) * self.INIT_STD
        tokens = self.tokenizer([r.ctx_init.replace("_", " ")])  # [1, T]
        if tokens.shape[1] < 1 + r.n_ctx:
            raise DearError(f"recipe: n_ctx = {r.n_ctx} needs {1 + r.n_ctx} text positions, the tokenizer has "
                            f"{tokens.shape[1]}; set train.recipes.tac.n_ctx lower")
        return internals.text_token_embeddings(self.clip, tokens)[0, 1:1 + r.n_ctx].detach().clone().float()

    def _learnable(self) -> dict[str, nn.Parameter]:
        return {name: p for name, p in self.named_parameters() if p.requires_grad}

    def half_parameters(self) -> list[nn.Parameter]:
        """Theirs under PREC fp16: the context (from the fp16 token embedding) and the cluster projections
        (`.half()`) are half; the deep prompts stay fp32 and are cast to half where they enter a tower."""
        return [self.context, *self.cluster_text.parameters(), *self.cluster_image.parameters()]

    # --- the task clusters --------------------------------------------------------------

    def descriptions(self, classnames: list[str]) -> torch.Tensor:
        """fixed_embeddings [C, E]: per class the mean of its descriptions' unnormalized features, normalized; the
        descriptions the recipe names (their descriptions/<dataset>_prompt.json), or the `templates` option."""
        def features():
            if self.recipe.descriptions == descriptions.TEMPLATES:
                return towers.template_features(self.clip, self.tokenizer, self.recipe.templates, classnames)
            path = descriptions.source(self.recipe)
            if path is None:
                raise DearError(f"train.recipes.{self.recipe.recipe}.descriptions: none for {self.recipe.dataset}; "
                                "`dear check` says what to set")
            if not path.is_file():
                raise DearError(descriptions.missing([self.recipe], "<your params file>")[0])
            texts = descriptions.read(path, classnames)  # [C] lists of texts
            return towers.text_list_features(self.clip, self.tokenizer, texts)
        return self.once(("descriptions", tuple(classnames)), features)

    def cluster(self, classnames: list[str]) -> None:
        """The centres of the training classes' features (at the first training step; kept in the trained state)."""
        k = min(self.recipe.clusters, len(classnames))
        generator = torch.Generator().manual_seed(self.cluster_seed)
        centres = kmeans_cosine(self.descriptions(classnames).cpu(), k, generator)
        self.centres = F.normalize(centres, dim=-1).to(self.device)

    def _centres(self, layer: nn.Linear) -> torch.Tensor:
        """The centres through one tower's cluster projection [k, D]."""
        if not len(self.centres):
            raise DearError(f"method {self.name}: no task clusters yet; they are formed from the training classes at "
                            "the first training step: train the model with `dear train`")
        return layer(self.centres.to(layer.weight.dtype))

    # --- image side ---------------------------------------------------------------------

    @property
    def frozen_depth(self) -> int:
        return 0  # the cluster tokens and prompts enter the first layer

    def _vision_tokens(self, layer: int, previous: torch.Tensor | None) -> torch.Tensor:
        """[1, k + n, D_v] entering image layer `layer`: the cluster tokens, then the layer's prompts; layer 1's
        through ln_pre (theirs: appended before it)."""
        clusters = self._centres(self.cluster_image)
        tokens = torch.cat([clusters, self.vision_prompts[layer - 1].to(clusters.dtype)])
        if layer == 1:
            tokens = internals.image_ln_pre(self.clip)(tokens.to(internals.image_dtype(self.clip)))
        return tokens[None]

    def _masks(self, patches: int, device: torch.device) -> dict[int, torch.Tensor]:
        """Their visual_mask at every layer [T, T]: the patch rows 1..N do not read the k cluster columns."""
        k, n = len(self.centres), self.recipe.n_ctx_vision
        def build():
            mask = torch.zeros(patches + k + n, patches + k + n, device=device)
            mask[1:patches, patches:patches + k] = float("-inf")
            return {layer: mask for layer in range(1, self.vision.layers + 1)}
        return self.once(("mask", patches, k, n), build)

    def encode(self, prefix: torch.Tensor) -> torch.Tensor:
        """[B, 1+N, D_v] patch embeddings after ln_pre -> [B, 1, E] normalized CLS feature."""
        rows = towers.run_image(self.vision, prefix, 1, self._vision_tokens, range(1, self.vision_depth + 1),
                                append_at=1, masks=self._masks(prefix.shape[1], prefix.device))  # [B, 1+k+n, D_v]
        return F.normalize(internals.image_embedding(self.clip, rows[:, 0]), dim=-1)[:, None]

    # --- text side ----------------------------------------------------------------------

    def prompt_input(self, classnames: list[str]) -> towers.TextInput:
        """The tokenized prompts "<ctx_init> <name>." of a class list (computed once)."""
        r = self.recipe
        def tokenized():
            texts = [prompts.with_clusters(r.ctx_init, r.n_ctx, r.clusters, name).text for name in classnames]
            return towers.text_input(self.clip, self.tokenizer, texts)
        return self.once(("prompt", tuple(classnames)), tokenized)

    def compute_text_features(self, classnames: list[str], template: str | None) -> torch.Tensor:
        prompt = self.prompt_input(classnames)
        clusters = self._centres(self.cluster_text)  # [k, D_t]
        lead = torch.cat([clusters, self.context.to(clusters.dtype)]).to(prompt.embeddings.dtype)  # [k + n, D_t]
        C, length = len(classnames), prompt.embeddings.shape[1] + lead.shape[0]
        if length > internals.text_context_length(self.clip):
            raise DearError(f"recipe: a prompt of {classnames[int(prompt.pool.argmax())]!r} with {len(clusters)} "
                            f"cluster tokens and n_ctx {self.recipe.n_ctx} vectors is {length} tokens, more than the "
                            f"text tower's {internals.text_context_length(self.clip)}; set train.recipes.tac.n_ctx lower")
        x = torch.cat([prompt.embeddings[:, :1], lead.expand(C, -1, -1), prompt.embeddings[:, 1:]], 1)
        deep = {layer: torch.cat([clusters, self.text_prompts[layer - 2].to(clusters.dtype)])
                for layer in range(2, self.text_depth + 1)}  # [k + n, D_t] each
        return towers.run_text(self.clip, self.text, towers.with_positions(self.clip, x), prompt.pool + len(lead),
                               tokens=deep)  # [C, E]

    # --- loss and averaging -------------------------------------------------------------

    def step(self, prefix, labels, classnames, frozen_image=None) -> Step:
        if not len(self.centres):
            self.cluster(classnames)
        p = self.recipe.feature_dropout if self.training else 0.0
        image = _dropped(self.encode(prefix)[:, 0].float(), p)  # [B, E]
        zero_shot = (frozen_image if frozen_image is not None else self.frozen_image(prefix)).float()
        k = self.recipe.get("k_transforms", 1) if frozen_image is not None and self.recipe.get("return_img0") else 1
        # their ZS_image_encoder (the same VisionTransformer, in train mode) drops out img0's feature once per
        # image, then .repeat(k_transforms, 1): one mask for the k views of an image
        zero_shot = _dropped(zero_shot[:len(zero_shot) // k], p).repeat(k, 1)  # [B, E]
        text = self.text_features(classnames).float()  # [C, E]
        logits = self.logit_scale().float() * image @ text.t()  # [B, C]
        terms = {"ce": cross_entropy(logits, labels), "txt": F.l1_loss(text, self.descriptions(classnames)),
                 "img": F.l1_loss(image, zero_shot)}
        r = self.recipe
        total = terms["ce"] + r.text_loss_weight * terms["txt"] + r.image_loss_weight * terms["img"]
        return Step(total, terms, logits)

    def on_epoch_end(self, epoch: int, epochs: int) -> None:
        self.average.update(epoch, epochs, self._learnable())

    def extra_state(self) -> dict[str, torch.Tensor]:
        return {"centres": self.centres, **self.average.state(AVERAGE)}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if "centres" in state:
            self.centres = state["centres"].to(self.device, self.centres.dtype)
        self.average.load_state(state, AVERAGE)


def _dropped(features: torch.Tensor, p: float) -> torch.Tensor:
    """normalize(dropout(e)) from e normalized [B, E]: dropout then normalization, as theirs (the norm is
    indifferent to the scale of e and to dropout's 1/(1-p))."""
    return F.normalize(F.dropout(features, p), dim=-1) if p else features


def kmeans_cosine(x: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """kmeans_pytorch's kmeans(x, k, distance='cosine') on rows x [C, E] -> the centres [k, E] (means of their
    members, not normalized). The first centres are k distinct rows drawn with `generator` (theirs:
    np.random.choice(C, k, replace=False))."""
    x = x.float()
    centres = x[torch.randperm(len(x), generator=generator)[:k]].clone()
    for _ in range(KMEANS_LIMIT):
        distance = 1.0 - F.normalize(x, dim=-1) @ F.normalize(centres, dim=-1).t()  # [C, k]
        nearest = distance.argmin(1)
        before = centres.clone()
        for j in range(k):
            members = x[nearest == j]
            if not len(members):  # an empty cluster restarts at a random row
                members = x[torch.randint(len(x), (1,), generator=generator)]
            centres[j] = members.mean(0)
        if float((centres - before).norm(dim=1).sum()) ** 2 < KMEANS_TOL:
            break
    return centres


def _depth(depth: int, layers: int, key: str, tower: str) -> int:
    if not 1 <= depth <= layers:
        raise DearError(f"recipe: {key} = {depth} does not fit this backbone's {layers} {tower} layers; "
                        f"set train.recipes.tac.{key} in 1..{layers}")
    return depth


MODELS = {"tac": TAC}
