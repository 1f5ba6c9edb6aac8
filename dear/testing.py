"""A testing kit for a method's author: one method through a tiny study, checked as `dear` checks its own.

    from dear.testing import Kit

    def test_my_method(tmp_path):
        Kit("my_method", tmp_path).check()  # every check below; one AssertionError naming each that failed

Each check is also a method of `Kit`, for a test of its own:
- `check_recipe`: the recipe resolves in every protocol the method claims and `dear recipe` prints every key
  with its source;
- `check_gradients`: one training step's loss reaches the method's learnable tensors only (the frozen CLIP gets
  no gradient and no `requires_grad`), and every learnable tensor is in what model.pt stores;
- `check_layers`: the recipe's keys that name layers fit the kit's two-layer towers (keys declared with
  `layers:` are fitted as the built-in ones are; a layer `build` refuses with `check_layer` is named with the
  `recipe=` to give); `check` says this one alone when it fails, as every other check would fail of it;
- `check_blocks`: every image block runs exactly once per image between `image_prefix` and `encode` (forward
  hooks count the images through each block): a method inserting image tokens that forgets to lower
  `frozen_depth` runs the first blocks twice, once frozen and once in `encode`;
- `check_zero_effect`: where the method declares values without effect (`zero_effect()` returns True), its
  image features, and its class features of a hand-written template, are zero-shot CLIP's;
- `check_trains`: `dear train` runs (a step per batch in its log) and leaves the frozen CLIP as it found it;
- `check_save_load`: model.pt loads into a model whose learnable state equals the saved one and whose logits
  equal those of the model training left, bit for bit, and saving that model again stores the same tensors;
- `check_resume`: a training run killed right after a checkpoint is written resumes, rerun, to the bytes of the
  uninterrupted run's model.pt;
- `check_protocols`: train, fuse and evaluate in every protocol the method claims (base-to-novel, transfer:
  cross-dataset and domain generalization, few-shot at 1 and 2 shots): an evaluation table with every class of
  every target it can score (`can_score`), and none of those it says it cannot; `dear predict` labels the test
  images and the API's `load_trained` scores them (`check_predict`).

What it builds once per `folder` (kits of several methods may share one): three datasets of one's own in ImageFolder layout (32x32 PNGs,
a colour patch per class; `kit_source` with 4 classes, `kit_other` with 3 others, `kit_shifted` with the
source's classes drawn inverted), prepared by `dear prepare`; a random-weight `dear-world-tiny` backbone (2
image and 2 text layers); a roles table (one head of each role per layer) for methods that read one; and a
params file: the demo's `params.yaml` with that study, every recipe shortened to 2 epochs of batch 4 with a
checkpoint after each step, the layer keys of the built-in recipes fitted to the tiny towers, and `recipe`
(keys of the method's own recipe) on top. Everything runs in this process through the `dear` commands, as
Snakemake runs them, on the CPU, in seconds; each method's runs go under `folder/<method>/`. The built-in
methods pass the same kit (tests/test_kit.py).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

PROTOCOLS = ("base_to_novel", "transfer", "few_shot")
SOURCE, OTHER, SHIFTED = "kit_source", "kit_other", "kit_shifted"
CLASSES = {SOURCE: ["apple", "guitar", "rocket", "turtle"], OTHER: ["cactus", "camera", "whale"]}  # sorted: labels 0..n-1
CLASSES[SHIFTED] = CLASSES[SOURCE]
IMAGES = {"train": 6, "val": 2, "test": 3}  # per class and split
SHOTS = (1, 2)  # the few-shot protocol's K
TOWER = 2  # layers of each tower of dear-world-tiny
ARCH = "dear-world-tiny"


@dataclass(frozen=True)
class Run:
    """One protocol's run of the method: what `dear train`, `dear fuse` and `dear evaluate` were given."""

    protocol: str
    folder: Path  # train/, fuse/ and eval/ below it
    dataset: str
    classes: str  # base | all
    shots: int | None = None

    @property
    def model(self) -> Path:
        return self.folder / "train" / "model.pt"


class Kit:
    """The tiny study of one method (built or installed), and the checks every built-in method passes."""

    def __init__(self, method: str, folder: str | os.PathLike, recipe: dict | None = None,
                 protocols: tuple[str, ...] | None = None):
        from dear.methods import entry

        self.method, self.folder = method, Path(folder)
        self.entry = entry(method)
        self.recipe_changes = dict(recipe or {})
        self.protocols = tuple(protocols or self.entry.protocols)

    # --- the tiny study --------------------------------------------------------------

    @cached_property
    def params_path(self) -> Path:
        """The method's params file; the datasets drawn and prepared and the backbone written (once per folder:
        kits of several methods in one folder share them)."""
        from dear.config.params import load_params

        path = self.folder / self.method / "params.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self._params(), sort_keys=False))
        load_params(path)  # a bad `recipe=` fails here, in one line
        if not (self.folder / "roles.parquet").is_file():
            for name, classes in CLASSES.items():
                _draw_imagefolder(self.folder / "images" / name, classes, inverted=name == SHIFTED)
                invoke("prepare", "--params", path, "--dataset", name, "--out", self.folder / "data" / name)
            _write_backbone(self.folder / "backbone")
            sha = json.loads((self.folder / "backbone/card.json").read_text())["sha256"]
            _write_roles(self.folder / "roles.parquet", sha)
        return path

    def _params(self) -> dict:
        from dear.methods.layers import KEYS, declared
        from dear.methods.recipe import load

        raw = yaml.safe_load(demo_params().read_text())
        raw["output_root"] = str(self.folder)
        raw["data"].update(source="coop", root=str(self.folder / "images"), datasets=list(CLASSES), seeds=[1],
                           shots=2, val_shots=1, workers=1,
                           custom={name: {"format": "imagefolder", "path": str(self.folder / "images" / name)}
                                   for name in CLASSES})
        raw["model"].update(arch=ARCH, pretrained="embedded")
        raw["profile"]["dataset"] = SOURCE
        raw["compute"].update(device="cpu", workers=0)
        raw["study"] = {"methods": [self.method], "base_to_novel": [SOURCE],
                        "transfer": {"source": SOURCE, "cross_dataset": [OTHER], "domain_generalization": [SHIFTED]},
                        "few_shot": {"datasets": [SOURCE], "shots": list(SHOTS)}}
        raw["report"].update(methods=[self.method], compare=self.method)
        recipes = raw["train"].setdefault("recipes", {}) or {}
        raw["train"]["recipes"] = recipes
        short = {"epochs": 2, "batch_size": 4, "warmup_epochs": 1, "rep_dim": 16}
        for block in recipes.values():  # the demo's own lengths would win over `all`
            for key in short:
                (block or {}).pop(key, None)
        recipes["all"] = {**(recipes.get("all") or {}), **short}
        own = self.entry.recipe
        for name, keys in {**KEYS, own: KEYS.get(own) or declared(own)}.items():  # layer keys fitted to the towers
            fitted = {spec.key: TOWER for spec in keys if spec.meaning == "depth"}
            fitted.update({spec.key: None if spec.default else spec.lowest for spec in keys if spec.meaning == "start"})
            if fitted:
                recipes[name] = {**(recipes.get(name) or {}), **fitted}
        recipes[own] = {**(recipes.get(own) or {}), **self.recipe_changes}
        load(own)
        raw["train"].update(method=self.method, checkpoint_every=1)
        return raw

    def runs(self) -> list[Run]:
        """The method's runs in every protocol it claims (few-shot: one per K)."""
        root = self.folder / self.method
        found = []
        if "base_to_novel" in self.protocols:
            found.append(Run("base_to_novel", root / "base_to_novel", SOURCE, "base"))
        if "transfer" in self.protocols:
            found.append(Run("transfer", root / "transfer", SOURCE, "all"))
        if "few_shot" in self.protocols:
            found += [Run("few_shot", root / f"few_shot-{k}", SOURCE, "all", k) for k in SHOTS]
        return found

    def fewshot_table(self, run: Run) -> Path:
        data = self.folder / "data" / run.dataset
        return data / (f"fewshot-shots{run.shots}-seed1.parquet" if run.shots else "fewshot-seed1.parquet")

    def train(self, run: Run, out: Path | None = None, checkpoint: Path | None = None, code: int = 0):
        out = out or run.folder / "train"
        shots = ["--shots", run.shots] if run.shots else []
        return invoke("train", "--params", self.params_path, "--method", self.method, "--dataset", run.dataset,
                      "--classes", run.classes, *shots, "--seed", 1, "--backbone", self.folder / "backbone",
                      "--fewshot", self.fewshot_table(run), "--roles", self.folder / "roles.parquet", "--out", out,
                      "--checkpoint", checkpoint or out.parent / "ckpt.pt", code=code)

    def fuse_and_evaluate(self, run: Run) -> Path:
        """`dear fuse` then `dear evaluate` of a trained run; its eval.parquet."""
        common = ["--params", self.params_path, "--model", run.model, "--method", self.method,
                  "--backbone", self.folder / "backbone", "--roles", self.folder / "roles.parquet"]
        fusion = run.folder / "fuse" / "fusion.json"
        invoke("fuse", *common, "--fewshot", self.fewshot_table(run), "--classes", run.classes, "--out", fusion)
        shots = ["--shots", run.shots] if run.shots else []
        invoke("evaluate", *common, "--fusion", fusion, "--source", self.folder / "data" / run.dataset,
               "--classes", run.classes, *shots, "--data", self.folder / "data", "--out", run.folder / "eval")
        return run.folder / "eval" / "eval.parquet"

    @cached_property
    def trained(self) -> Run:
        """The first protocol's run, trained once: what the save, load and resume checks read. The logits of the
        model as training left it, before model.pt is written, are kept (`at_save`)."""
        from dear.stages import train as stage

        run, real = self.runs()[0], stage.save_trained

        def keep_logits(path, model, record):
            mode = model.training
            self.at_save = self.logits(model.eval(), run)
            model.train(mode)
            real(path, model, record)

        stage.save_trained = keep_logits
        try:
            self.train(run)
        finally:
            stage.save_trained = real
        return run

    def backbone(self):
        from dear.model.clip import load_backbone

        self.params_path  # noqa: B018  (built)
        return load_backbone(self.folder / "backbone")

    def model(self, run: Run | None = None):
        """A fresh model of the method as `dear train` builds it for `run` (default: the first protocol's)."""
        from dear.methods import create
        from dear.methods.trained import read_roles
        from dear.config.params import load_params

        run = run or self.runs()[0]
        params = load_params(self.params_path)
        backbone = self.backbone()
        recipe = params.train.recipe(self.method, run.dataset, run.protocol, run.shots)
        roles = read_roles(self.folder / "roles.parquet", backbone, backbone.card["sha256"])
        return create(self.method, backbone, recipe, roles, seed=1)

    # --- the checks ---------------------------------------------------------------------

    def check(self) -> None:
        """Every check; an AssertionError naming each one that failed, and why. A recipe that does not fit the
        kit's backbone is said alone: every other check would fail of it."""
        try:
            self.check_layers()
        except AssertionError as error:
            raise AssertionError(f"method {self.method} fails dear.testing's check_layers: {error}") from None
        failed = []
        for check in (self.check_recipe, self.check_gradients, self.check_blocks, self.check_zero_effect,
                      self.check_trains, self.check_save_load, self.check_resume, self.check_protocols):
            try:
                check()
            except AssertionError as error:
                failed.append(f"{check.__name__}: {error}")
        if len(failed) == 1:
            raise AssertionError(f"method {self.method} fails dear.testing's {failed[0]}")
        assert not failed, f"method {self.method} fails {len(failed)} checks of dear.testing:\n" + "\n".join(failed)

    def check_recipe(self) -> None:
        from dear.methods.recipe import REQUIRED

        for protocol in self.protocols:
            printed = invoke("recipe", "--params", self.params_path, "--method", self.method, "--protocol", protocol)
            jobs = json.loads(invoke("recipe", "--params", self.params_path, "--method", self.method,
                                     "--protocol", protocol, "--json").output)
            assert jobs, f"`dear recipe --protocol {protocol}` lists no job of the method"
            for job in jobs:
                lacking = [key for key in REQUIRED if key not in job["settings"]]
                assert not lacking, f"{protocol}: the recipe has no {lacking}, which `fuse` and `evaluate` read"
                unsourced = [key for key, s in job["settings"].items() if not s.get("source") or not s.get("kind")]
                assert not unsourced, f"{protocol}: recipe values without a source: {unsourced}"
                unprinted = [key for key in job["settings"] if key not in printed.output]
                assert not unprinted, f"`dear recipe --protocol {protocol}` does not print {unprinted}"

    def check_gradients(self) -> None:
        import torch

        model = self.model()
        learnable = {name for name, p in model.named_parameters() if p.requires_grad}
        clip_weights = {f"clip.{name}" for name in self.backbone().model.state_dict()}
        assert not learnable & clip_weights, f"the frozen CLIP's weights are learnable: {sorted(learnable & clip_weights)[:3]}"
        stored = set(model.trainable_state())
        assert learnable <= stored, f"learnable tensors model.pt would not store: {sorted(learnable - stored)[:3]}"
        if not model.trains or type(model).fits_features:
            return
        classes = CLASSES[SOURCE][: len(CLASSES[SOURCE]) // 2]
        torch.manual_seed(0)
        images = torch.randn(4, 3, 32, 32)
        model.train()
        result = model.step(model.image_prefix(images), torch.tensor([0, 1, 0, 1]), classes)
        assert torch.isfinite(result.total), f"the loss of one step is {float(result.total)}"
        result.total.backward()
        reached = {name for name, p in model.named_parameters() if p.grad is not None}
        assert reached <= learnable, f"gradients reach tensors that are not learnable: {sorted(reached - learnable)[:3]}"
        assert reached, "one training step's loss reaches no learnable tensor"
        assert set(result.terms) == set(type(model).TERMS), \
            f"step's terms {sorted(result.terms)} are not the TERMS the class declares {sorted(type(model).TERMS)}"

    def check_layers(self) -> None:
        """The recipe's keys that name layers fit the kit's towers (the keys declared `layers:` are fitted here as
        the built-in recipes' are); a layer `build` refuses (`check_layer`) is named with the value to give."""
        from dear.methods.base import LayerError

        for run in self.runs():
            try:
                self.model(run)
            except LayerError as error:
                raise AssertionError(
                    f"{run.protocol}: recipe key {error.key} names a layer outside the kit's backbone ({error.layers} "
                    f"layers a tower); give the kit one that fits, Kit({self.method!r}, folder, recipe={{{error.key!r}: "
                    f"{error.layers}}}), or declare the key's layers in recipe.yaml (keys: {error.key}: {{..., layers: "
                    "{towers: [image], meaning: depth}}) and the kit fits it (docs/your-method.md#the-recipe)") from None

    def check_blocks(self) -> None:
        """Between `image_prefix` and `encode` every image block runs once per image: the frozen prefix runs
        blocks 1..frozen_depth without autograd, `encode` the rest (forward hooks on each block's first norm,
        which `internals.block_forward` calls once a pass, count the images through it)."""
        import torch

        model = self.load(self.trained).eval()  # as evaluate runs it (TAC forms its clusters in training)
        counts = [0] * model.vision.layers
        hooks = [block.ln_1.register_forward_hook(lambda module, args, out, i=i: counts.__setitem__(
            i, counts[i] + args[0].shape[0])) for i, block in enumerate(model.vision.blocks)]
        images = 3
        try:
            with torch.no_grad():
                model.encode(model.image_prefix(torch.randn(images, 3, 32, 32)))
        finally:
            for hook in hooks:
                hook.remove()
        wrong = [(layer, count / images) for layer, count in enumerate(counts, start=1) if count != images]
        if not wrong:
            return
        layer, times = wrong[0]
        depth = model.frozen_depth
        raise AssertionError(
            f"image block {layer} runs {times:g} times per image between image_prefix and encode (frozen_depth is "
            f"{depth}: the prefix runs blocks 1..{depth}, so encode must run "
            + (f"blocks {depth + 1}..{model.vision.layers}, each once" if depth < model.vision.layers else "none")
            + "); set the property frozen_depth to the layer before the first one your tokens enter (0 when "
            "they enter layer 1), and run encode from layer frozen_depth + 1 (docs/your-method.md#the-towers)")

    def check_zero_effect(self) -> None:
        """A method whose `zero_effect()` sets its learnable tensors to values without effect (and says True)
        gives zero-shot CLIP's image features and, with a hand-written template, its class features."""
        import torch
        import torch.nn.functional as F

        from dear.methods import prompts, towers
        from dear.model import internals

        model = self.model().eval()
        with torch.no_grad():
            if not model.zero_effect():
                return
            torch.manual_seed(0)
            images = torch.randn(3, 3, 32, 32)
            ours = model.encode(model.image_prefix(images))[:, 0]  # [B, E]
            clip = F.normalize(internals.encode_image(model.clip, images), dim=-1)
            _as_clip(ours, clip, "image features")
            template = model.recipe.get("template")
            if template is None:
                return
            classes = CLASSES[SOURCE]
            clip = towers.encode_texts(model.clip, model.text, model.tokenizer,
                                       [prompts.hand_written(template, name).text for name in classes])
            _as_clip(model.text_features(classes, template), clip, f"class features of {template!r}")

    def check_trains(self) -> None:
        import pyarrow.parquet as pq
        import torch

        run = self.trained
        log = pq.read_table(run.folder / "train" / "train_log.parquet")
        model = self.load(run)
        if model.trains and not type(model).fits_features:
            assert log.num_rows > 0 and log["step"].to_pylist() == list(range(log.num_rows)), \
                f"the train log holds steps {log['step'].to_pylist()[:5]}..., not one row per step from 0"
        untouched = self.backbone().model.state_dict()  # a method's own tensors inside the towers are not CLIP's
        changed = [name for name, value in model.clip.state_dict().items()
                   if name in untouched and not torch.equal(value, untouched[name])]
        assert not changed, f"training changed the frozen CLIP: {changed[:3]}"

    def check_save_load(self) -> None:
        import torch

        from dear.methods.trained import read_trained, save_trained

        run = self.trained
        model, saved = self.load(run), read_trained(run.model)["state"]
        state = model.trainable_state()
        assert set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in state), \
            "the loaded model's learnable state is not model.pt's, bit for bit"
        again_path = run.folder / "saved-again" / "model.pt"
        save_trained(again_path, model, {key: value for key, value in read_trained(run.model).items()
                                         if key not in ("state", "method", "recipe")})
        again = read_trained(again_path)["state"]
        assert all(torch.equal(again[k], saved[k]) for k in saved), "saving the loaded model stores other tensors"
        loaded, second = self.logits(model, run), self.logits(self.load(run, again_path), run)
        assert torch.equal(loaded, self.at_save), \
            "the model loaded from model.pt gives other logits than the model training saved (state it keeps " \
            "outside its learnable tensors belongs in extra_state)"
        assert torch.equal(loaded, second), "a model loaded from model.pt and one saved again give other logits"

    def check_resume(self) -> None:
        from dear.runtime.io import FAULTS

        run = self.trained
        model = self.load(run)
        if not model.trains or type(model).fits_features:
            return  # nothing trains by steps: nothing to resume
        reference = run.model.read_bytes()
        out, checkpoint = run.folder / "killed" / "train", run.folder / "killed" / "ckpt.pt"
        before = FAULTS.passed
        self.train(run, out, checkpoint)  # counts the run's write points
        points = FAULTS.passed - before
        assert out.joinpath("model.pt").read_bytes() == reference, "two uninterrupted runs differ"
        _remove(out.parent)
        at = _first_point_after(checkpoint, points, lambda k: _killed(lambda: self.train(run, out, checkpoint), k))
        assert at is not None, "no checkpoint was written before the run ended (train.checkpoint_every: 1)"
        assert not out.joinpath("model.pt").exists(), f"killed at write point {at}, yet a model.pt exists"
        self.train(run, out, checkpoint)
        assert out.joinpath("model.pt").read_bytes() == reference, \
            f"killed after its checkpoint (write point {at}) and rerun, the run's model.pt differs from the " \
            "uninterrupted run's"

    def check_protocols(self) -> None:
        import pandas as pd

        for run in self.runs():
            if run != self.trained:
                self.train(run)
            table = pd.read_parquet(self.fuse_and_evaluate(run))
            model = self.load(run)
            for target, split, classes in _targets(run):
                rows = table[(table["target"] == target) & (table["split"] == split) & (table["stream"] == "output")]
                if model.can_score(classes):
                    assert not rows.empty, f"{run.protocol}: {target} {split} has no rows"
                    for protocol, scored in rows.groupby("protocol"):  # the transfer source: in both of its protocols
                        assert sorted(scored["classname"]) == classes, \
                            f"{protocol}: {target} {split} scores {sorted(scored['classname'])}, not {classes}"
                    assert (rows["correct"] <= rows["total"]).all() and (rows["total"] > 0).all()
                else:
                    assert rows.empty, f"{run.protocol}: {target} {split} has rows though the method cannot score it"
            self.check_predict(run)

    def check_predict(self, run: Run) -> None:
        """`dear predict` labels the source's test images, and the API's `load_trained` scores them."""
        import pandas as pd
        import torch

        from dear import api

        images = self.folder / "images" / run.dataset / "test"
        common = ["--backbone", self.folder / "backbone", "--roles", self.folder / "roles.parquet",
                  "--fusion", run.folder / "fuse" / "fusion.json"]
        invoke("predict", "--params", self.params_path, "--model", run.model, "--images", images,
               "--out", run.folder / "predict", *common)
        predicted = pd.read_csv(run.folder / "predict" / "predictions.csv")
        expected = IMAGES["test"] * len(CLASSES[run.dataset])
        assert len(predicted) == expected, f"{run.protocol}: dear predict labels {len(predicted)} of {expected} images"
        model = api.load_trained(run.model, self.folder / "backbone", self.folder / "roles.parquet",
                                 run.folder / "fuse" / "fusion.json")
        classes = _targets(run)[0][2]
        with torch.no_grad():
            logits = model(torch.randn(2, 3, 32, 32), classes)
        assert logits.shape == (2, len(classes)) and torch.isfinite(logits).all(), \
            f"{run.protocol}: the API's load_trained model gives logits of shape {tuple(logits.shape)}"

    # --- helpers -------------------------------------------------------------------

    def load(self, run: Run, path: Path | None = None):
        from dear.methods.trained import load_trained

        return load_trained(path or run.model, self.backbone(), self.folder / "roles.parquet")

    def logits(self, model, run: Run):
        """[3, S+1, C] stream logits of fixed images on the trained classes, computed as a `dear` stage computes
        them: float sums depend on the thread count, on oneDNN and on who does the matrix products
        (compute.reproducible: numpy's OpenBLAS, dear.compute.blas), so each is fixed here, inside a stage and out."""
        import torch
        from threadpoolctl import threadpool_limits

        from dear.compute import blas
        from dear.config.params import load_params

        torch.manual_seed(0)
        images = torch.randn(3, 3, 32, 32)
        threads = torch.get_num_threads()
        products = load_params(self.params_path).compute.reproducible and not blas.installed()
        torch.set_num_threads(1)
        if products:
            blas.install()
        try:
            with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False), threadpool_limits(1):
                return model.logits(model.encode(model.image_prefix(images)), _targets(run)[0][2])
        finally:
            if products:
                blas.remove()
            torch.set_num_threads(threads)


def demo_params() -> Path:
    """The demo's params.yaml of the dear checkout this package runs from (an editable install: make install)."""
    from dear.pipeline.codegraph import PACKAGE

    path = PACKAGE.parent / "params.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: dear.testing builds its tiny study from the demo's params.yaml of a dear "
                                "checkout; install dear from its clone (pip install -e <clone>, or make install)")
    return path


def invoke(*args: Any, code: int = 0):
    """`dear <args>` in this process, as Snakemake runs it; its exit code must be `code`."""
    from typer.testing import CliRunner

    from dear.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == code, f"dear {' '.join(str(a) for a in args[:2])} exited {result.exit_code} " \
                                     f"(expected {code}): {result.output[-1500:]}"
    return result


def _as_clip(ours, clip, what: str) -> None:
    """`ours` equal zero-shot CLIP's `clip` (both [*, E], normalized) to float rounding, or the check's one line."""
    gap = float((ours - clip).abs().max())
    assert gap < 1e-5, f"with zero_effect() its {what} differ from zero-shot CLIP's by up to {gap:.2g}; make " \
                       "zero_effect() set every learnable tensor to a value without effect (or return False: the " \
                       "method has none)"


def _targets(run: Run) -> list[tuple[str, str, list[str]]]:
    """(target, split, classes) that the run's evaluation scores, the classes it trained on first."""
    classes = CLASSES[run.dataset]
    if run.protocol == "base_to_novel":
        half = (len(classes) + 1) // 2
        return [(run.dataset, "base", classes[:half]), (run.dataset, "novel", classes[half:])]
    if run.protocol == "transfer":
        return [(run.dataset, "all", classes), (OTHER, "all", CLASSES[OTHER]), (SHIFTED, "all", CLASSES[SHIFTED])]
    return [(run.dataset, "all", classes)]


def _draw_imagefolder(folder: Path, classes: list[str], inverted: bool = False) -> None:
    """train/ val/ test/ of one sub-folder per class: 32x32 PNGs of noise with a colour patch placed per class."""
    from PIL import Image

    rng = np.random.default_rng(len(classes) * 7 + inverted)
    for split, count in IMAGES.items():
        for label, name in enumerate(classes):
            (folder / split / name).mkdir(parents=True, exist_ok=True)
            for index in range(count):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                row, col = divmod(label % 4, 2)
                pixels[row * 16:row * 16 + 16, col * 16:col * 16 + 16] = ((67 * label) % 256, 40, 200)
                Image.fromarray(255 - pixels if inverted else pixels).save(folder / split / name / f"{index}.png")


def _write_backbone(folder: Path) -> None:
    """A random-weight backbone as `dear backbone` leaves one: model.pt (state dict) and card.json."""
    import torch

    from dear.runtime.io import sha256_file
    from dear.model.clip import create_model

    torch.manual_seed(0)
    model = create_model(ARCH, None)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / "model.pt")
    (folder / "card.json").write_text(json.dumps({"arch": ARCH, "sha256": sha256_file(folder / "model.pt")}))


def _write_roles(path: Path, model_sha256: str) -> None:
    """A roles table of the tiny backbone: per layer, heads of every role (attribute of colour and of object,
    generalization, mixed)."""
    import pyarrow as pa

    from dear.runtime.io import write_parquet
    from dear.methods.trained import ROLES_SCHEMA

    kinds = (("attribute", "color"), ("attribute", "object"), ("generalization", "other"), ("mixed", "other"))
    rows = [dict(layer=layer, head=head, concept=concept, mask_role=role, model_sha256=model_sha256)
            for layer in range(1, TOWER + 1) for head, (role, concept) in enumerate(kinds)]
    write_parquet(path, pa.Table.from_pylist(rows, schema=ROLES_SCHEMA), ROLES_SCHEMA)


def _killed(run: Callable[[], Any], point: int) -> int:
    """Run `run()` in a forked child SIGKILLed at its `point`-th write point (dear.runtime.io.FAULTS); its wait status."""
    from dear.runtime.io import FAULTS, KILL_ENV

    pid = os.fork()
    if pid == 0:  # the child never returns into the caller
        code = 98
        try:
            FAULTS.passed = 0
            os.environ[KILL_ENV] = str(point)
            run()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def _first_point_after(checkpoint: Path, points: int, kill_at: Callable[[int], int]) -> int | None:
    """The first write point at which a killed run has left a checkpoint (and no finished run): its number."""
    for point in range(1, points + 1):
        status = kill_at(point)
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            return None
        if checkpoint.is_file():
            return point
    return None


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
