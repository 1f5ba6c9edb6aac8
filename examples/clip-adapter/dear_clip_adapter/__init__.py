"""CLIP-Adapter as a dear method: the declaration `dear` finds through the `dear.methods` entry point.

Light on purpose: `dear recipe` and `dear check` read this and the recipe file without importing torch; the
model class is imported only when a model is built.
"""

from dear.contract import Method

METHOD = Method(
    model="dear_clip_adapter.model:CLIPAdapter",
    recipe="dear_clip_adapter:recipe.yaml",
    title="CLIP-Adapter: a residual MLP on the frozen image feature (gaopengcuhk/CLIP-Adapter)",
    contract=1,
)
