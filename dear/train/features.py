"""Fitting a method on the frozen features of its shots (the linear probe), instead of the trainer's steps.

lpclip/feat_extractor.py encodes every image once under the test transform (no augmentation) and
lpclip/linear_probe.py fits on those features; so here: the training shots and the validation shots of
the few-shot table are encoded once, in the method's precision on the stage's device, and handed to the
model's `fit` (`MethodModel.fits_features`). A method that trains and then
chooses on the validation shots (Tip-Adapter-F's alpha and beta,
`MethodModel.searches_validation`) has them encoded the same way after training (`search`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from dear.scoring import evaluation
from dear.data.manifest import check_images_exist, read_fewshot, select
from dear.errors import DearError
from dear.config.params import Compute
from dear.train.data import Shots

log = logging.getLogger("dear.train")


def validation_shots(path: Path, subset: str, classnames: list[str]) -> evaluation.ImageSet:
    """The few-shot table's validation shots of `subset` (labels as the training shots': label or subset_label)."""
    rows = select(read_fewshot(path), subset=None if subset == "all" else subset, fewshot_split="val")
    labels = rows["label" if subset == "all" else "subset_label"].to_pylist()
    return evaluation.ImageSet(paths=rows["path"].to_pylist(), labels=labels, classnames=classnames)


def fit(model, shots: Shots, fewshot: Path, subset: str, compute: Compute, batch_size: int, description: str):
    """Encode the shots (train, then validation) once and `model.fit` on them; returns what `fit` returns."""
    val = _validation(model, shots, fewshot, subset, "searches its C on them (lpclip)")
    model, precision = evaluation.prepared(model, compute)
    transform = evaluation.eval_transform(model)
    train = evaluation.ImageSet(shots.paths, shots.labels, shots.classnames)
    encoded = [evaluation.encode_images(model, images, transform, batch_size, compute.workers, precision,
                                        f"{description}: {name} shots")  # [N, 1, E]
               for name, images in (("training", train), ("validation", val))]
    return model.fit(encoded[0], train.labels, encoded[1], val.labels, shots.classnames)


SEARCHES = "searches its alpha and beta on them after training (Tip-Adapter's search_hp)"


def search_shots(model, shots: Shots, fewshot: Path, subset: str) -> evaluation.ImageSet:
    """The validation shots a `searches_validation` model chooses on (checked before it trains: fail fast)."""
    return _validation(model, shots, fewshot, subset, SEARCHES)


def search(model, val: evaluation.ImageSet, compute: Compute, batch_size: int, description: str):
    """After training: encode the validation shots once under the test transform and let the model choose on them
    (`MethodModel.search_validation`: Tip-Adapter-F's alpha and beta, as its main.py searches them on the val
    features after fine-tuning); returns what the model returns."""
    model, precision = evaluation.prepared(model.eval(), compute)
    encoded = evaluation.encode_images(model, val, evaluation.eval_transform(model), batch_size, compute.workers,
                                       precision, f"{description}: validation shots")  # [N, 1, E]
    return model.search_validation(encoded, val.labels, val.classnames)


def _validation(model, shots: Shots, fewshot: Path, subset: str, why: str) -> evaluation.ImageSet:
    """The validation shots of `subset`, or the one-line error saying why `model` needs them."""
    val = validation_shots(fewshot, subset, shots.classnames)
    if not len(val):
        raise DearError(f"{fewshot}: no validation shots of the {subset} classes; {model.name} {why}: "
                        "rerun `dear prepare` with data.val_shots >= 1, on a dataset with a validation split")
    check_images_exist(val.paths, fewshot, "validation image")
    return val
