"""VPT-deep as a dear method: the declaration `dear` finds through the `dear.methods` entry point.

Light on purpose: `dear recipe` and `dear check` read this and the recipe file without importing torch; the
model class is imported only when a model is built.
"""

from dear.contract import Method

METHOD = Method(
    model="dear_vpt_deep.model:VPTDeep",
    recipe="dear_vpt_deep:recipe.yaml",
    title="VPT-deep: learnable tokens in image layers 1..depth (muzairkhattak/multimodal-prompt-learning trainers/vpt.py)",
    contract=1,
)
