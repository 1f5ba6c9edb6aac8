"""Typed, validated parameters: `params.yaml` is the single source of truth.

Each top-level section of `params.yaml` is a pydantic model below, strict
(no silent coercion: `"16"` is not an int) and closed (an unknown key is an
error, not ignored). A bad file fails with one line naming the file, the key
and the expected type. Files are read by the one strict reader
(`dear.config.strict_yaml`), as the Snakefile and DVC's check stage read them.

`workflow/schemas/params.schema.yaml` is generated from these models
(`python -m dear.config.params > workflow/schemas/params.schema.yaml`) for editors;
a test keeps the two in step.
"""

from __future__ import annotations

import os
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from dear.config import strict_yaml
from dear.errors import DearError
from dear.methods import REGISTRY, entry
from dear.methods.recipe import load as load_recipe
from dear.methods.recipe import problems as recipe_problems
from dear.methods.recipe import resolve
from dear.runtime.paramsfile import DEFAULT_PATH, in_use, use  # noqa: F401 (the stages' and the CLI's names for them)


class Section(BaseModel):
    """Base of every section: strict types, unknown keys rejected, frozen, every float finite.

    `allow_inf_nan=False` reaches every float of every section, in lists and
    mappings too: YAML's `.inf` / `.nan` would pass `gt=0` and train a model
    of NaNs.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# --- data: which datasets, where they live, how they are checked ---------------

class Data(Section):
    source: Literal["embedded", "coop"] = Field(
        description="embedded: the packaged emoji world under `root`; coop: real datasets in CoOp's layout")
    root: str = Field(description="folder holding one sub-folder per dataset, in CoOp's layout")
    datasets: list[str] = Field(description="datasets the pipeline prepares (folder names of DATASETS.md)")
    seeds: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, description="few-shot seeds, distinct, >= 0; every seed gets its own few-shot table and runs")
    shots: int = Field(ge=1, description="training shots per class")
    val_shots: int = Field(ge=0, description="validation shots per class: min(shots, val_shots) (CoOp: 4)")
    verify: Literal["decode", "exists", "none"] = Field(
        description="decode decodes every image; exists reads each file's header (a dataset of one's own: also its "
                    "end, so a cut file is caught, and its content is compared across splits); none opens no file")
    skip_bad: bool = Field(description="drop missing/corrupt images (listed next to the manifest) instead of failing")
    hash_content: bool = Field(description="record each image's sha256 in the manifest (reads every byte)")
    workers: int = Field(ge=1, description="parallel workers for image verification")
    max_listed: int = Field(ge=1, description="how many bad files an error names before it counts the rest")
    custom: dict[str, "CustomDataset"] = Field(
        default_factory=dict, description="datasets of one's own, by name: {format, path, ...} (docs/your-data.md); "
                                          "list a name in data.datasets to prepare it")

    @field_validator("custom")
    @classmethod
    def _custom_names(cls, custom: dict) -> dict:
        from dear.data.custom import name_problem

        for name in custom:
            problem = name_problem(name, reserved=recipe_datasets())
            if problem:
                raise ValueError(problem)
        return custom

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
        if repeated:
            raise ValueError(f"seed {repeated[0]} is listed twice; list each seed once")
        return seeds


def recipe_datasets() -> set[str]:
    """Every dataset name some recipe file has a layer for: a dataset of one's own may not take one (it would
    silently get that dataset's recipe values)."""
    from dear.methods.recipe import load

    return {dataset for entry in REGISTRY.values() for dataset in load(entry.recipe).datasets}


class CustomDataset(Section):
    """One dataset of one's own under `data.custom.<name>`: read by `dear.data.formats` (one module per format)."""

    format: str = Field(description="imagefolder (class sub-folders of train/, val/, test/) | csv (path and label or "
                                    "classname per row, a split column or one file per split) | coop-json (a CoOp "
                                    "split_*.json)")
    path: str = Field(description="the dataset's folder (imagefolder), CSV file (or folder of `splits` files) or "
                                  "split JSON; relative to where the stages run")
    images: str | None = Field(None, description="coop-json: the folder its image paths are relative to "
                                                 "(null: the JSON's folder)")
    splits: dict[Literal["train", "val", "test"], str] | None = Field(
        None, description="per split, its sub-folder (imagefolder; null: train, val, test) or its CSV file (csv: one "
                          "file per split, relative to `path`)")
    classnames: dict[str | int, str] | str | None = Field(
        None, description="class key (folder name, CSV classname or label) -> the name the text tower reads, as a "
                          "mapping or a file of '<key> <name>' lines (null: the key, '_' read as a space)")
    template: str | None = Field(None, description="the hand-written prompt of the methods that have one, {} the class "
                                                   "name (null: each method's default, \"a photo of a {}.\")")
    base_classes: list[str] | str | None = Field(
        None, description="the base classes of base-to-novel (keys or names), as a list or a file of one per line "
                          "(null: the first half of the sorted labels, as CoOp)")
    split_seed: int = Field(1, ge=0, description="seed of the validation split carved from train when there is "
                                                 "none (Dassl's split_trainval, 20% of each class)")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        from dear.data.formats import READERS

        if value not in READERS:
            raise ValueError(f"unknown format {value!r}; use one of {', '.join(READERS)}")
        return value

    @model_validator(mode="after")
    def _keys_of_its_format(self) -> "CustomDataset":
        """A key the format does not read would be ignored silently: refused instead."""
        unread = {"images": self.format != "coop-json", "splits": self.format == "coop-json"}
        for key, ignored in unread.items():
            if ignored and getattr(self, key) is not None:
                raise ValueError(f"format {self.format} does not read '{key}'; remove it"
                                 + (" (its split file names the splits)" if key == "splits" else ""))
        return self

    @field_validator("template")
    @classmethod
    def _one_slot(cls, value: str | None) -> str | None:
        if value is not None and value.count("{}") != 1:
            raise ValueError(f"{value!r} must hold {{}} once, where the class name goes, e.g. \"a photo of a {{}}.\"")
        return value


Data.model_rebuild()


# --- world: the embedded emoji image-text world (dear world) -------------------

class World(Section):
    seed: int = Field(description="seed of every image, class choice and corpus batch")
    image_size: int = Field(ge=16, description="image side in pixels (must equal the embedded model's image size)")
    grid: int = Field(description="positions form a grid x grid layout (2 or 3)")
    n_objects: int = Field(ge=2, description="object classes of world_objects (and world_objects_sketch)")
    n_objects_b: int = Field(ge=2, description="object classes of world_objects_b, disjoint from world_objects")
    n_objects_rare: int = Field(ge=0, description="object classes of world_objects_rare (0: not drawn): shown in the "
                                                  "corpus as often as the others, named with `caption_rare`")
    colors: list[str] = Field(description="background colours (the color attribute)")
    textures: list[str] = Field(description="background textures (the texture attribute)")
    shapes: list[str] = Field(description="outlined shapes drawn next to the object (the shape attribute)")
    attribute_sets: list[Literal["colors", "textures", "shapes", "positions"]] = Field(
        description="attribute datasets to materialize (world_<name>)")
    emoji_px_min: int = Field(ge=4, description="smallest emoji side in pixels")
    emoji_px_max: int = Field(ge=4, description="largest emoji side in pixels")
    shape_px_min: int = Field(ge=4, description="smallest shape side in pixels")
    shape_px_max: int = Field(ge=4, description="largest shape side in pixels")
    jitter_px: int = Field(ge=0, description="objects move up to this many pixels off their cell centre")
    texture_period: int = Field(ge=2, description="texture period in pixels (align with the patch size)")
    texture_shade: float = Field(gt=0.0, lt=1.0, description="texture ink = background colour x this")
    outline_px: int = Field(ge=1, description="dark outline width of shapes")
    color_jitter: int = Field(ge=0, description="per-channel jitter of background colours (0..255 units)")
    objects_split: list[int] = Field(min_length=3, max_length=3, description="train, val, test images per class (object sets)")
    sketch_split: list[int] = Field(min_length=3, max_length=3, description="train, val, test per class of world_objects_sketch")
    attribute_split: list[int] = Field(min_length=3, max_length=3, description="train, val, test per class (attribute sets)")
    caption_object: float = Field(ge=0.0, le=1.0, description="probability a caption names the object (else 'thing')")
    caption_position: float = Field(ge=0.0, le=1.0, description="probability a caption names the position")
    caption_shape: float = Field(ge=0.0, le=1.0, description="probability a caption names the shape")
    caption_color: float = Field(ge=0.0, le=1.0, description="probability a caption names the background colour")
    caption_texture: float = Field(ge=0.0, le=1.0, description="probability a caption names the texture")
    caption_rare: float = Field(ge=0.0, le=1.0, description="probability a caption names a world_objects_rare object")
    corpus_sketch: float = Field(ge=0.0, le=1.0, description="fraction of corpus scenes drawn in sketch style")


# --- model: which CLIP, from where -----------------------------------------------

class Model(Section):
    arch: str = Field(description="open_clip model name (dear-world, ViT-B-16, ...) or a path to a config JSON")
    pretrained: str = Field(description="embedded (train here) | an open_clip tag (openai, laion2b_...) | a weights file")
    cache_dir: str | None = Field(description="open_clip download cache (null: open_clip's default)")


# --- backbone: contrastive pretraining of the embedded model ---------------------

class BackboneSanity(Section):
    enabled: bool | Literal["auto"] = Field(
        description="score the backbone zero-shot on every world test set (needs `dear world`); auto: only the "
                    "embedded backbone (real or your own weights need no check on emoji)")
    max_images_per_set: int | None = Field(
        ge=1, description="a seeded sample of at most this many test images per set; null = all of them")


class Augmentation(Section):
    crop_scale: list[float] = Field(min_length=2, max_length=2, description="random resized crop area range")
    flip_prob: float = Field(ge=0.0, le=1.0, description="probability of a horizontal flip")
    interpolation: Literal["bicubic", "bilinear"] = Field(description="resize filter, train and test")


class Backbone(Section):
    seed: int = Field(description="seed of the initial weights")
    steps: int = Field(ge=1, description="optimizer steps (fixed count: results never depend on machine speed)")
    batch_size: int = Field(ge=2, description="image-caption pairs per step")
    lr: float = Field(gt=0.0, description="peak AdamW learning rate")
    weight_decay: float = Field(ge=0.0, description="AdamW weight decay")
    warmup_fraction: float = Field(ge=0.0, lt=1.0, description="linear warm-up share of the steps, then cosine")
    init_temperature: float = Field(gt=0.0, description="initial softmax temperature tau = 1/exp(logit_scale) (CLIP: 0.07)")
    precision: Literal["fp32", "bf16"] = Field(
        description="autocast precision of pretraining on CPU (on CUDA: compute.precision)")
    threads: int = Field(ge=1, description="torch CPU threads (results are bitwise reproducible per thread count)")
    eval_batch_size: int = Field(ge=1, description="batch size of the zero-shot sanity evaluation")
    sanity: BackboneSanity
    augmentation: Augmentation = Field(
        description="random resized crop and flip of every corpus image (crop [1.0, 1.0] and flip 0: none), so that "
                    "the downstream training augmentation stays in the backbone's distribution")
    twin_fraction: float = Field(ge=0.0, le=1.0, description="share of each batch made of twin scenes differing in one attribute")
    twin_weights: dict[str, float] = Field(description="how often twins differ in position, shape, texture, color")


# --- compute: where every model stage runs -------------------------------------------

class Compute(Section):
    """One device setting for backbone, profile, train, fuse and evaluate."""

    device: Literal["auto", "cpu", "cuda"] = Field(description="auto = cuda when a CUDA device is visible, else cpu")
    precision: Literal["bf16", "fp32"] = Field(
        description="bf16 autocast on CUDA where the stage allows it (not profile); CPU runs fp32")
    workers: int = Field(ge=0, description="image loading processes (0 = in the stage's own process)")
    reproducible: bool = Field(
        description="the same floats on every x86-64 CPU (AVX2 or newer): the stage caps torch's CPU kernels at "
                    "AVX2 (ATen, MKL's CNR, oneDNN off) and turns on deterministic algorithms (on CUDA too); "
                    "false: the machine's fastest kernels, numbers that move with the CPU (docs/compute.md)")


# --- train / fusion: the methods' recipes and DeAR's fusion ----------------------------

class Train(Section):
    """Which recipe each method trains with: its authors' (dear/methods/recipes/), changed here where asked."""

    method: str = Field(description="default method of `dear train` when --method is not given")
    recipes: dict[str, Any] = Field(
        description="changes to the authors' recipes: `all` (every method that has the key) and one entry per "
                    "recipe (zeroshot, coop, mmrl, dear, ...), each with keys, `datasets: {ds: {...}}`, "
                    "`transfer: {...}` and `few_shot: {..., shots: {K: {...}}}`; `dear recipe` shows every value "
                    "and its source")
    checkpoint_every: int = Field(ge=1, description="steps between resumable checkpoints")
    _templates: dict[str, str] = PrivateAttr(default_factory=dict)  # dataset -> data.custom.<dataset>.template
    _own: frozenset[str] = PrivateAttr(default_factory=frozenset)  # the datasets of one's own (data.custom)
    _roles: dict | None = PrivateAttr(default=None)  # the study's roles, recorded by a `+roles` variant's recipe

    @field_validator("method")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _registered_method(name)

    def recipe(self, method: str, dataset: str, protocol: str, shots: int | None = None):
        """The resolved recipe (`dear.methods.recipe.Recipe`) of one run: what the trainer and the model read
        (`shots`: the few_shot protocol's K)."""
        return resolve(self.recipes, method, dataset, protocol, shots, self._templates.get(dataset),
                       own=dataset in self._own, roles=self._roles)


def _registered_method(name: str) -> str:
    """A built-in method, or one an installed package declares that can be used (else its one-line problem)."""
    try:
        entry(name)
    except DearError as err:
        raise ValueError(str(err)) from None
    return name


class Fusion(Section):
    mode: Literal["refit", "trained"] = Field(description="refit alpha on validation shots, or keep the trained one")
    novel: Literal["fused", "cls"] = Field(
        description="novel classes and transfer targets: cls = the CLS stream alone (MMRL's decoupled inference) | "
                    "fused = the fused logits")
    refit_iterations: int = Field(ge=1, description="L-BFGS iterations when refitting alpha on validation shots")


# --- evaluate and the study's protocols -------------------------------------------

class Transfer(Section):
    @model_validator(mode="before")
    @classmethod
    def _source_given(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "source" in raw and raw["source"] is None:
            raise ValueError("study.transfer.source is null; to switch the transfer protocols off, write "
                             "study.transfer: null or study.transfer.enabled: false")
        return raw

    enabled: bool = Field(True, description="false: no transfer job runs (the keys stay for later; "
                                            "study.transfer: null does the same)")
    source: str = Field(description="dataset trained on all its classes (the paper: imagenet)")
    cross_dataset: list[str] = Field(description="other datasets it is tested on, all their classes (unseen)")
    domain_generalization: list[str] = Field(description="domain-shifted copies of the source's classes")


def _no_default(schema: dict) -> None:
    """Leave a null default out of the JSON schema: Snakemake's validation would fill it in and then walk into it."""
    schema.pop("default", None)


class FewShot(Section):
    @field_validator("shots")
    @classmethod
    def _distinct(cls, shots: list[int]) -> list[int]:
        repeated = sorted({count for count in shots if shots.count(count) > 1})
        if repeated:
            raise ValueError(f"shot count {repeated[0]} is listed twice; list each once")
        return shots

    @field_validator("datasets")
    @classmethod
    def _once(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("a dataset is listed twice; list each once")
        return names

    enabled: bool = Field(True, description="false: no few-shot job runs (study.few_shot: null does the same)")
    datasets: list[str] = Field(min_length=1, description="datasets trained and tested on all their classes, "
                                                          "once per shot count")
    shots: list[Annotated[int, Field(ge=1)]] = Field(
        [1, 2, 4, 8, 16], min_length=1,
        description="training shots per class K, one run per K (validation: min(K, data.val_shots)); each K has its "
                    "own draw, as Dassl's shot_K-seed_S.pkl")


class Study(Section):
    """What the pipeline runs: methods x seeds x the paper's three protocols (SPEC §8) and few-shot learning;
    each protocol can be off."""

    @field_validator("methods")
    @classmethod
    def _registered(cls, names: list[str]) -> list[str]:
        for name in names:
            _registered_method(name)
        if len(set(names)) != len(names):
            raise ValueError("a method is listed twice; list each once")
        return names

    methods: list[str] = Field(min_length=1, description="methods run side by side (dear/methods/__init__.py lists them)")
    base_to_novel: list[str] = Field(description="datasets trained on base classes, tested on base and novel "
                                                 "([]: no base-to-novel job)")
    transfer: Transfer | None = Field(description="one all-class model per method and seed, tested across datasets "
                                                  "and domains (null: no transfer job)")
    few_shot: FewShot | None = Field(None, description="one model per method, dataset and shot count, trained and "
                                                       "tested on all classes (null or absent: no few-shot job)",
                                     json_schema_extra=_no_default)  # absent: off (Snakemake's validate fills no null)

    @property
    def transfer_on(self) -> Transfer | None:
        """The transfer protocols when they run, else None."""
        return self.transfer if self.transfer is not None and self.transfer.enabled else None

    @property
    def few_shot_on(self) -> FewShot | None:
        """The few-shot protocol when it runs, else None."""
        return self.few_shot if self.few_shot is not None and self.few_shot.enabled else None

    def few_shot_runs(self) -> list[tuple[str, int]]:
        """(dataset, K) of every few-shot run of one method, in config order."""
        few = self.few_shot_on
        return [(name, count) for name in few.datasets for count in few.shots] if few else []


class Evaluate(Section):
    batch_size: int = Field(ge=1, description="images per forward pass when scoring")
    reuse_mb: float = Field(ge=0, description="frozen image blocks' output kept between the seeds of one job "
                                              "(MB in all; 0: every seed recomputes it)")


# --- profile: head decomposition, TextSpan, Concept Entropy, roles ------------

class ProfileConcepts(Section):
    source: Literal["bank", "cluster"] = Field(
        description="bank: each text's concept label (ours, exact) | cluster: SBERT + HDBSCAN (the paper's way)")
    allowed: list[str] = Field(description="concepts a text bank may use (must include the five core attributes)")
    min_cluster_size: int = Field(ge=2, description="cluster mode: HDBSCAN min_cluster_size")
    min_samples: int = Field(ge=1, description="cluster mode: HDBSCAN min_samples")


class ProfileRoles(Section):
    mode: Literal["absolute", "quantile"] = Field(
        description="absolute: low/high are entropies in bits | quantile: quantiles of all profiled heads")
    low: float = Field(ge=0.0, description="H <= low is an attribute head")
    high: float = Field(ge=0.0, description="H >= high is a generalization head (low < high)")


class ProfileAblation(Section):
    enabled: bool = Field(description="embedded world only: validate the roles by mean-ablating labelled heads")
    split: Literal["train", "val", "test"] = Field(description="split of profile.dataset whose images are ablated")
    max_images: int = Field(ge=2, description="at most this many images (a seeded sample of the split)")
    random_sets: int = Field(ge=1, description="random head sets of the same size per labelled set")


class Profile(Section):
    dataset: str = Field(description="prepared dataset whose images are profiled")
    split: Literal["train", "val", "test"] = Field(
        description="manifest split profiled (never the test split of a dataset you evaluate on)")
    max_images: int = Field(ge=2, description="at most this many images (a seeded sample of the split)")
    seed: int = Field(description="seed of the image sample")
    batch_size: int = Field(ge=1, description="images per forward pass")
    text_batch_size: int = Field(ge=1, description="texts per text-encoder pass")
    layers: int = Field(ge=1, description="profile the last this many image layers")
    svd_rank: int = Field(ge=1, description="r: texts are projected onto the top-r right singular vectors")
    texts_per_head: int = Field(ge=1, description="N: texts TextSpan picks per head")
    text_bank: str = Field(description="'default' (packaged, general photo descriptions), 'world' (the embedded "
                                       "world's own descriptions) or a TSV/Parquet of text and concept")
    contributions: Literal["embedding", "normalized"] = Field(
        description="embedding: terms sum to the raw embedding (SPEC) | normalized: divided by its norm (TextSpan code)")
    weighting: Literal["uniform", "variance"] = Field(
        description="P over concepts: uniform counts picks (paper) | variance weights them by variance explained")
    concepts: ProfileConcepts
    roles: ProfileRoles
    ablation: ProfileAblation


# --- report: tables and pictures of every eval table --------------------------------

class Report(Section):
    @model_validator(mode="after")
    def _compared_is_listed(self) -> "Report":
        if self.compare is not None and self.methods is not None and self.compare not in self.methods:
            raise ValueError(f"report.compare: {self.compare!r} is not one of report.methods; add it there or pick one")
        return self

    methods: list[str] | None = Field(
        None, min_length=1, description="row order of the tables, each a method of study.methods (null: "
                                        "study.methods); a listed method with no eval table shows as missing")
    std_ddof: int = Field(ge=0, le=1, description="std over seeds: 1 = sample std (n-1), 0 = population std")
    std_warning: float = Field(ge=0.0, description="warn when a dataset's std over seeds exceeds this (points)")
    decimals: int = Field(ge=0, le=6, description="decimals of the percentages in results.md")
    reference: bool = Field(
        description="show the published numbers beside ours where the run uses their setting (ViT-B/16 OpenAI on "
                    "CoOp's datasets, 16 shots), in a block of their own")
    compare: str | None = Field(
        None, min_length=1, description="the method whose paired differences against every other method (its "
                                        "baselines and its ablation) the report shows, with intervals and a verdict "
                                        "(null: dear when the study runs it, else the study's last method that "
                                        "trains)")
    confidence: float = Field(gt=0.5, lt=1.0, description="level of every interval (over seeds, over test images)")
    bootstrap_resamples: int = Field(
        ge=100, description="resamples of the test images in the paired bootstrap of each difference")
    loss_smoothing: int = Field(ge=1, description="moving-average window (steps) of the plotted loss curves; 1 = raw")
    dpi: int = Field(ge=50, description="resolution of the report's PNG pictures")


class Params(Section):
    """The whole `params.yaml`."""

    @field_validator("output_root")
    @classmethod
    def _plain_folder(cls, value: str) -> str:
        """Engines build every path from it: no braces (Snakemake wildcards) and no spaces (shell commands)."""
        if not value or any(char in value for char in "{} \t\n"):
            raise ValueError(f"{value!r} is not a plain folder path; use one without spaces or braces, e.g. '.'")
        return value

    @model_validator(mode="after")
    def _datasets_are_prepared(self) -> "Params":
        """Every dataset the study or the profile uses must be one that `prepare` makes."""
        missing = unprepared(self.data, self.study, self.profile)
        if missing:
            raise ValueError(missing[0])
        return self

    @model_validator(mode="after")
    def _custom_templates(self) -> "Params":
        """A dataset of one's own with a `template` gives it to every recipe that has one (`Train.recipe`)."""
        templates = {name: entry.template for name, entry in self.data.custom.items() if entry.template is not None}
        if templates:
            self.train._templates = templates
        return self

    @model_validator(mode="after")
    def _study_roles(self) -> "Params":
        """The roles a `+roles` variant trains with, recorded in its recipe (`Train.recipe`): the study's profile."""
        rule = self.profile.roles
        unit = " (quantiles of all profiled heads)" if rule.mode == "quantile" else " bits"
        table = os.path.normpath(os.path.join(self.output_root, "roles", self.profile.dataset, "roles.parquet"))
        self.train._roles = {
            "roles_table": (table, "profile.dataset: the table `dear profile` writes for the study"),
            "roles_threshold": (f"Concept Entropy H <= {rule.low} attribute, H >= {rule.high} generalization{unit}",
                                "profile.roles (mode, low, high)")}
        return self

    @model_validator(mode="after")
    def _own_datasets(self) -> "Params":
        """A dataset of one's own gets the recipes' `own` layers (`Train.recipe`: min_steps)."""
        self.train._own = frozenset(self.data.custom)
        return self

    @model_validator(mode="after")
    def _reproducible_backbone(self) -> "Params":
        """bf16 CPU kernels differ per instruction set (AMX, AVX512-BF16, AVX2): no same floats everywhere."""
        if self.compute.reproducible and self.model.pretrained == "embedded" and self.backbone.precision == "bf16":
            raise ValueError("backbone.precision: bf16 pretraining on the CPU gives other weights on every kind of CPU, "
                             "but compute.reproducible is true; set backbone.precision: fp32 (or compute.reproducible: "
                             "false to keep bf16)")
        return self

    @model_validator(mode="after")
    def _report_of_the_study(self) -> "Params":
        """The report shows the study's methods: a method it does not run would be a row of dashes."""
        found = report_problems(self.study, self.report)
        if found:
            raise ValueError(found[0])
        return self

    @property
    def report_methods(self) -> list[str]:
        """The report's methods in row order: report.methods, else study.methods."""
        return list(self.report.methods or self.study.methods)

    @property
    def report_compare(self) -> str:
        """The method the report compares with every other: report.compare, else `compared(report_methods)`."""
        return self.report.compare or compared(self.report_methods)

    @model_validator(mode="after")
    def _recipes(self) -> "Params":
        """train.recipes changes only keys the recipes have, with values of their types."""
        found = recipe_problems(self.train.recipes)
        if found:
            raise ValueError(found[0])
        return self

    output_root: str = Field(
        description="folder every output of this config goes under, logs and checkpoints too ('.' for the demo); "
                    "give each config its own, so studies never share a file")
    data: Data
    world: World
    model: Model
    compute: Compute
    backbone: Backbone
    train: Train
    fusion: Fusion
    study: Study
    evaluate: Evaluate
    profile: Profile
    report: Report


def unprepared(data: Data, study: Study, profile: Profile) -> list[str]:
    """One line per dataset a key of the study or the profile names but data.datasets does not list."""
    transfer = study.transfer_on
    users = [*(("study.base_to_novel", name) for name in study.base_to_novel), ("profile.dataset", profile.dataset)]
    if study.few_shot_on is not None:
        users += [("study.few_shot.datasets", name) for name in study.few_shot_on.datasets]
    if transfer is not None:
        users += [("study.transfer.source", transfer.source),
                  *(("study.transfer.cross_dataset", name) for name in transfer.cross_dataset),
                  *(("study.transfer.domain_generalization", name) for name in transfer.domain_generalization)]
    keys: dict[str, list[str]] = {}
    for key, name in users:
        if name not in data.datasets and key not in keys.setdefault(name, []):
            keys[name].append(key)
    return [f"{' and '.join(named)} {'use' if len(named) > 1 else 'uses'} {name}, which data.datasets does not "
            f"list; add {name} to data.datasets, or remove it from {' and '.join(named)}"
            for name, named in keys.items()]


def report_problems(study: Study, report: Report) -> list[str]:
    """One line per method `report.methods` or `report.compare` names but `study.methods` does not run."""
    methods = study.methods
    found = [f"report.methods: {name!r} is not in study.methods ({', '.join(methods)}); remove it, or leave "
             "report.methods out (null): it defaults to study.methods"
             for name in report.methods or () if name not in methods]
    if report.compare is not None and report.compare not in methods:
        found.append(f"report.compare: {report.compare!r} is not in study.methods ({', '.join(methods)}); pick one of "
                     "them, or leave report.compare out (null): dear when the study runs it, else its last method "
                     "that trains")
    return found


COMPARED = "dear"  # the method of this project: what the report compares with every other when the study runs it


def compared(methods: list[str]) -> str:
    """report.compare's default: dear when listed, else the last method whose recipe trains (a Dassl trainer: not
    zero-shot CLIP, not a fitted probe), else the last method."""
    if COMPARED in methods:
        return COMPARED
    trained = [name for name in methods if load_recipe(entry(name).recipe).trains]
    return (trained or methods)[-1]


def sanity_on(params: Any) -> bool:
    """Whether `dear backbone` scores the backbone on the world (`backbone.sanity.enabled`; auto: embedded only)."""
    enabled = params.backbone.sanity.enabled
    return params.model.pretrained == "embedded" if enabled == "auto" else bool(enabled)


def world_needed(params: Any) -> bool:
    """Whether some job reads the embedded world: its images, or its corpus to train the backbone on, or the
    backbone's sanity check on it. A study of real data and real weights draws no world."""
    return params.data.source == "embedded" or params.model.pretrained == "embedded" or sanity_on(params)


# --- loading -------------------------------------------------------------------

def read_yaml(path: str | Path) -> dict:
    """Read a params file with the one strict reader (`dear.config.strict_yaml`): what it accepts, every engine reads alike."""
    raw = strict_yaml.read(path)
    if not isinstance(raw, dict):
        raise DearError(f"{path}: expected a mapping of sections at the top level")
    return raw


def load_params(path: str | Path = DEFAULT_PATH, overrides: Sequence[str] = ()) -> Params:
    """Load and validate the whole file; any problem is a one-line `DearError`.

    `overrides` are `KEY=VALUE` strings (`--set data.shots=4`): each VALUE is
    read as YAML, exactly as in the file, and replaces the dotted KEY before
    validation, so an override passes the same checks and gets the same errors.
    """
    raw = read_yaml(path)
    apply_overrides(raw, overrides)
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise DearError(_one_line(err, _source(Path(path), overrides, err))) from None


def validate(raw: dict, path: str | Path) -> tuple[Params | None, list[str]]:
    """(params, []) for a valid mapping, else (None, one line per validation problem)."""
    try:
        return Params.model_validate(raw), []
    except ValidationError as err:
        return None, [error_line(problem, Path(path)) for problem in err.errors()]


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """{dotted key: value} of `KEY=VALUE` strings; VALUE is read like the params file (`dear.config.strict_yaml`)."""
    return dict(_parse_override(item) for item in overrides)


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise DearError(f"--set {item}: expected KEY=VALUE with a dotted key, e.g. --set data.shots=4")
    return key, strict_yaml.parse(value, f"--set {item}", lines=False)


def apply_overrides(raw: dict, overrides: Sequence[str]) -> None:
    """Set each dotted key of `overrides` in `raw`, in place and in order (a later --set wins).

    A missing section is created, and then rejected by the validation as an
    unknown key with the usual message; a key under a plain value is an error.
    """
    for item in overrides:
        key, value = _parse_override(item)
        *parents, leaf = key.split(".")
        node = raw
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(parents[:depth + 1])
                raise DearError(f"--set {item}: '{where}' is a value, not a section; set '{where}' itself")
        node[leaf] = value


def _source(path: Path, overrides: Sequence[str], err: ValidationError) -> str:
    """The file, or the file and the --set the first problem comes from (its key, a key under it or above it)."""
    key = ".".join(str(part) for part in err.errors()[0]["loc"])
    if not key and overrides:  # a rule across sections: any --set may have broken it
        return f"{path} (with --set {' '.join(overrides)})"
    for item in reversed(overrides):  # the last --set of a key is the one in force
        name = item.partition("=")[0].strip()
        if key == name or key.startswith(name + ".") or name.startswith(key + "."):
            return f"{path} (--set {item})"
    return str(path)


def _one_line(err: ValidationError, path: Path | str) -> str:
    """The first validation problem, as: file, dotted key, what was expected."""
    return error_line(err.errors()[0], path)


def error_line(problem: dict, path: Path) -> str:
    """One validation problem as a line: file, dotted key, what was expected, what to do."""
    key = ".".join(str(part) for part in problem["loc"])
    expected = _expected_type(problem["loc"])
    kind = problem["type"]
    if kind == "missing":
        return f"{path}: missing key '{key}' (expected {expected}); add it"
    if kind == "extra_forbidden":
        return f"{path}: unknown key '{key}'; remove it or fix its spelling"
    if kind == "value_error":  # a cross-key rule of a section (model validator)
        message = problem["msg"].removeprefix("Value error, ")
        return f"{path}: {message}" if not key else f"{path}: key '{key}': {message}"
    given = problem.get("input")
    hint = ""
    if isinstance(given, str) and _looks_numeric(given):
        hint = " (quoted in the file, so it is text: remove the quotes)"
    shown = f"{type(given).__name__} {given!r}" if not isinstance(given, (dict, list)) else type(given).__name__
    return f"{path}: key '{key}' must be {expected} ({problem['msg'].lower()}), got {shown}{hint}"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _expected_type(loc: tuple) -> str:
    """Walk the models along `loc` and describe the annotation found there."""
    model: Any = Params
    annotation: Any = Params
    for part in loc:
        if isinstance(part, int) or typing.get_origin(annotation) is dict:  # a list item or a mapping's value
            args = typing.get_args(annotation)
            annotation = args[-1] if args else annotation
            model = annotation
            continue
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return "no such key"
        annotation = fields[part].annotation
        model = annotation
    return _describe(annotation)


def _describe(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _describe(typing.get_args(annotation)[0])
    if origin is Literal:
        return "one of " + " | ".join(str(v) for v in typing.get_args(annotation))
    if origin in (list, tuple):
        return f"a list of {_describe(typing.get_args(annotation)[0])}"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"a mapping of {_describe(key)} to {_describe(value)}"
    if origin in (typing.Union, getattr(__import__('types'), 'UnionType', None)):
        return " or ".join(_describe(arg) for arg in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"a '{annotation.__name__.lower()}' section"
    return getattr(annotation, "__name__", str(annotation))


def json_schema() -> dict:
    """JSON Schema of `params.yaml`, for Snakemake's `validate`."""
    schema = Params.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["description"] = "params.yaml of the dear pipeline (generated by `python -m dear.config.params`)"
    return schema


if __name__ == "__main__":
    sys.stdout.write("# Generated by `python -m dear.config.params`; do not edit by hand.\n")
    sys.stdout.write(yaml.safe_dump(json_schema(), sort_keys=False))
