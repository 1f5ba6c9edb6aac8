"""Prompt assembly: the text each method tokenizes, shared by the models and `dear recipe`.

Every method of the table writes class names with "_" read as a space before
tokenizing (CoOp, CoCoOp, KgCoOp, MaPLe, PromptSRC, MMRL, zero-shot CLIP: each
trainer's `name.replace("_", " ")`). Then one of three forms, named by the
recipe file's `prompt`:
- template: the hand-written prompt, `template.format(name)` (zero-shot CLIP);
- context: "<ctx_init> <name>." whose first min(n_ctx, words) tokens after
  start-of-text are learnable vectors initialized from those words' embeddings
  (CoOp, CoCoOp, KgCoOp: n_ctx >= the 4 words of "a photo of a", so all four;
  MaPLe: n_ctx 2, "a photo" of "a photo of a"), or "X X ... X <name>." with
  n_ctx random vectors when ctx_init is empty (CoOp's few-shot setting);
- tokens: the hand-written prompt, plus learnable tokens inserted after
  start-of-text from a deeper text layer on (MMRL, MMRL++, DeAR);
- clusters: "<ctx_init> <name>." kept whole, with the task clusters' tokens
  and n_ctx learnable vectors inserted after start-of-text from layer 1 on
  (TAC: "X X ... X <name>." when the vectors start random).
Nothing here needs torch: the models tokenize `Prompt.text`, `dear recipe`
prints `Prompt.shown`.
"""

from __future__ import annotations

from dataclasses import dataclass

FORMS = ("none", "template", "context", "tokens", "clusters")


def classname(raw: str) -> str:
    """A class name as every trainer of the table writes it in a prompt."""
    return raw.replace("_", " ")


@dataclass(frozen=True)
class Prompt:
    text: str  # what is tokenized
    learnable: int = 0  # tokens right after start-of-text replaced by learnable vectors
    inserted: int = 0  # learnable tokens inserted after start-of-text in deeper text layers
    from_layer: int | None = None  # the first text layer (1-based) holding the inserted tokens
    marks: str | None = None  # how the inserted tokens are shown (None: R1..Rn from their first layer)

    @property
    def shown(self) -> str:
        """The prompt as a person reads it: learnable tokens as X, inserted ones as [R1..Rn] (or their marks)."""
        words = self.text.split(" ")
        text = " ".join(["X"] * self.learnable + words[self.learnable:])
        if self.inserted and self.marks:
            return f"[SOT] [{self.marks}] {text}"
        if self.inserted:
            where = f" from text layer {self.from_layer}" if self.from_layer else ""
            return f"[SOT] [R1..R{self.inserted}{where}] {text}"
        return text


def hand_written(template: str, raw: str) -> Prompt:
    return Prompt(template.format(classname(raw)))


def context(ctx_init: str, n_ctx: int, raw: str) -> Prompt:
    """CoOp's prompt: context words (or n_ctx placeholders) before the class name and a full stop."""
    words = ctx_init.replace("_", " ").split(" ") if ctx_init else ["X"] * n_ctx
    learnable = min(n_ctx, len(words)) if ctx_init else n_ctx
    return Prompt(f"{' '.join(words)} {classname(raw)}.", learnable=learnable)


def context_words(ctx_init: str, n_ctx: int) -> str:
    """The words whose token embeddings initialize the learnable context ('' for random vectors)."""
    if not ctx_init:
        return ""
    return " ".join(ctx_init.replace("_", " ").split(" ")[:n_ctx])


def with_tokens(template: str, raw: str, tokens: int, from_layer: int | None) -> Prompt:
    return Prompt(template.format(classname(raw)), inserted=tokens, from_layer=from_layer)


CLUSTER_WORD_INIT = 20  # TAC: `if ctx_init and n_ctx <= 20` the vectors start from the words' token embeddings


def with_clusters(ctx_init: str, n_ctx: int, clusters: int, raw: str) -> Prompt:
    """TAC's prompt: "<ctx_init> <name>." whole (n_ctx "X" words when the vectors start random), after start-of-text
    the `clusters` task-cluster tokens (K) and the n_ctx learnable vectors (X) inserted."""
    words = ctx_init.replace("_", " ") if ctx_init and n_ctx <= CLUSTER_WORD_INIT else " ".join(["X"] * n_ctx)
    return Prompt(f"{words} {classname(raw)}.", inserted=clusters + n_ctx, from_layer=1,
                  marks=f"K1..K{clusters} X1..X{n_ctx}")


def of_recipe(form: str, values: dict, raw: str) -> Prompt | None:
    """The prompt a recipe of `form` builds for class `raw` (None: the method has no text side of its own)."""
    if form == "template":
        return hand_written(values["template"], raw)
    if form == "context":
        return context(values["ctx_init"], values["n_ctx"], raw)
    if form == "tokens":
        tokens = values.get("text_tokens", values.get("tokens"))
        start = values.get("text_start_layer", values.get("start_layer"))
        return with_tokens(values["template"], raw, tokens, start)
    if form == "clusters":
        return with_clusters(values["ctx_init"], values["n_ctx"], values["clusters"], raw)
    return None
