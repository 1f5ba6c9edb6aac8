"""`dear predict`: label new images with a trained model of any method.

Reads a `model.pt` of `dear train` (with its backbone folder, and for `dear`
its roles table; optionally the `fusion.json` of `dear fuse`) and images: a
folder (every image file below it, torchvision's extensions, hidden files
skipped) or a text file listing one path per line (relative to the list).
The class list is the one the model was trained on, or a file of class names
(one per line), which may mix trained classes and classes never trained on.
Each class is scored by the rule `dear evaluate` uses for it (`--rule by-class`,
the default): a class the model was trained on by the method's output on seen
classes (DeAR and MMRL: the fused streams), any other by its rule for unseen
classes (DeAR: `fusion.novel`; MMRL: the CLS stream alone), so adding classes
to the list never changes a trained class's score, only the classes it
competes with. `--rule seen` or `unseen` scores every class by one of the two
(evaluate's `fused` stream rows are the first on novel classes).

Writes into the output folder `predictions.parquet` (one row per image: its
path, the top-k classes, their probabilities and the rule that scored each,
or the error that kept it out; provenance in the metadata, with every class's
rule) and the same rows as `predictions.csv`. An image that cannot be read is
listed with its error, not fatal; if no image can be read, nothing is written.
"""

from __future__ import annotations

import csv
import io as text_io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import torch

from dear.compute import cpus
from dear.errors import DearError
from dear.runtime.io import files_under, output_folder, provenance, sha256_json, write_parquet, write_text
from dear.config.params import Params
from dear.runtime.progress import track

log = logging.getLogger("dear.predict")

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's

SCHEMA = pa.schema([
    pa.field("path", pa.string(), nullable=False),  # as listed (a folder's files: below the folder given)
    pa.field("classes", pa.list_(pa.string()), nullable=False),  # top-k, most probable first ([] on error)
    pa.field("probabilities", pa.list_(pa.float64()), nullable=False),  # softmax over the whole class list
    pa.field("rules", pa.list_(pa.string()), nullable=False),  # the rule that scored each of `classes` (RULES)
    pa.field("error", pa.string(), nullable=True),  # why the image was not scored (null: scored)
])
SEEN, UNSEEN = "seen", "unseen"  # a class's rule: the method's output on trained classes | on classes never trained on
RULES = ("by-class", SEEN, UNSEEN)  # --rule: each class by the rule evaluate uses for it | every class by one rule


@dataclass(frozen=True)
class Inputs:
    model: Path  # model.pt of `dear train`
    backbone: Path  # folder of `dear backbone`
    images: Path  # a folder of images, or a text file of image paths (one per line)
    roles: Path | None = None  # roles.parquet (method dear)
    fusion: Path | None = None  # fusion.json of `dear fuse` (None: the trained alpha)
    class_list: Path | None = None  # a text file of class names (None: the classes the model was trained on)
    top_k: int = 5
    rule: str = "by-class"  # RULES: how each class of the list is scored


@dataclass(frozen=True)
class Outputs:
    folder: Path
    FILES: ClassVar[tuple[str, ...]] = ("predictions.parquet", "predictions.csv")


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    from dear.scoring import evaluation
    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained, read_trained

    if inputs.top_k < 1:
        raise DearError(f"--top-k: {inputs.top_k}; give at least 1")
    if inputs.rule not in RULES:
        raise DearError(f"--rule: {inputs.rule!r} is not a rule; use one of {', '.join(RULES)}")
    paths = image_paths(inputs.images)
    trained = read_trained(inputs.model)
    classnames, seen = class_list(inputs.class_list, trained.get("classnames") or [], inputs.model)
    rules = class_rules(classnames, trained.get("classnames") or [], inputs.rule)
    model, precision = evaluation.prepared(load_trained(inputs.model, load_backbone(inputs.backbone), inputs.roles),
                                           params.compute)
    alpha = fusion_alpha(inputs.fusion, model)
    log.info("%s: %d image(s), %d classes (%s); %s", model.name, len(paths), len(classnames),
             "the trained ones" if seen else f"from {inputs.class_list}", rules_line(rules, inputs.rule, params))
    rows = score(model, paths, classnames, rules, alpha, params, precision, min(inputs.top_k, len(classnames)))
    failed = [row for row in rows if row["error"] is not None]
    if len(failed) == len(rows):
        raise DearError(f"{inputs.images}: none of the {len(rows)} image(s) could be read, e.g. {failed[0]['error']}; "
                        "give images PIL can open")
    used = {"model": inputs.model, "backbone": Path(inputs.backbone) / "card.json", "images": inputs.images,
            **{name: path for name, path in (("roles", inputs.roles), ("fusion", inputs.fusion),
                                             ("class_list", inputs.class_list)) if path is not None}}
    record = provenance({"fusion": params.fusion, "evaluate": params.evaluate, "compute": params.compute}, used)
    record.update(images_sha256=sha256_json(paths), classnames=classnames, seen=seen, top_k=inputs.top_k,
                  alpha=alpha.tolist(), method=model.name, rule=inputs.rule, class_rules=dict(zip(classnames, rules)))
    with output_folder(outputs.folder, Outputs.FILES) as folder:
        write_parquet(folder / "predictions.parquet", pa.Table.from_pylist(rows, schema=SCHEMA), SCHEMA, record)
        write_text(folder / "predictions.csv", as_csv(rows, min(inputs.top_k, len(classnames))))
    for row in failed[:5]:
        log.warning("not scored: %s", row["error"])
    log.info("labelled %d image(s)%s -> %s", len(rows) - len(failed),
             f"; {len(failed)} could not be read (listed with their error)" if failed else "", outputs.folder)


# --- inputs ------------------------------------------------------------------------

def image_paths(images: Path) -> list[str]:
    """The images a folder holds (sorted, recursive) or a list file names (in its order)."""
    images = Path(images)
    if images.is_dir():
        found = sorted(str(path) for path in files_under(images)
                       if path.suffix.lower() in IMAGE_EXTENSIONS
                       and not any(part.startswith(".") for part in path.relative_to(images).parts))
        if not found:
            raise DearError(f"{images}: no image files in this folder (extensions {', '.join(IMAGE_EXTENSIONS)}); "
                            "give a folder of images or a text file listing them")
        return found
    if not images.is_file():
        raise DearError(f"{images}: not found; give a folder of images or a text file listing them, one per line")
    if images.suffix.lower() in IMAGE_EXTENSIONS:
        return [str(images)]
    try:
        lines = images.read_text().splitlines()
    except UnicodeDecodeError:
        raise DearError(f"{images}: neither an image nor a text list of image paths; give a folder or a list "
                        "file") from None
    found = [str(images.parent / line.strip()) for line in lines if line.strip() and not line.startswith("#")]
    if not found:
        raise DearError(f"{images}: lists no image paths; write one path per line (relative to the list)")
    return found


def class_list(path: Path | None, trained: list[str], model: Path) -> tuple[list[str], bool]:
    """(class names to choose from, whether they are exactly the trained ones)."""
    if path is None:
        if not trained:
            raise DearError(f"{model}: records no class names; give the class list with --class-list FILE")
        return list(trained), True
    path = Path(path)
    if not path.is_file():
        raise DearError(f"{path}: class list not found; give a text file with one class name per line")
    names = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    if not names:
        raise DearError(f"{path}: no class names; write one class name per line")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DearError(f"{path}: class {repeated[0]!r} is listed {names.count(repeated[0])} times; list each once")
    return names, sorted(names) == sorted(trained)


def class_rules(classnames: list[str], trained: list[str], rule: str) -> list[str]:
    """The rule of each class (SEEN | UNSEEN): by-class, SEEN for a class the model was trained on, else UNSEEN."""
    if rule != "by-class":
        return [rule] * len(classnames)
    known = set(trained)
    return [SEEN if name in known else UNSEEN for name in classnames]


def rules_line(rules: list[str], rule: str, params: Params) -> str:
    """What the log says of the rules: how many classes each scored, and what the unseen rule is here."""
    counts = ", ".join(f"{rules.count(kind)} by the {kind}-class rule" for kind in (SEEN, UNSEEN) if kind in rules)
    unseen = f" (fusion.novel: {params.fusion.novel}; MMRL: the CLS stream)" if UNSEEN in rules else ""
    return f"--rule {rule}: {counts}{unseen}"


def fusion_alpha(path: Path | None, model) -> torch.Tensor:
    from dear.runtime.io import read_json

    if path is None:
        return model.alpha.detach().float().cpu()
    alpha = read_json(path).get("alpha") if Path(path).is_file() else None
    if alpha is None or len(alpha) != len(model.alpha):
        raise DearError(f"{path}: no alpha of {len(model.alpha)} streams for {model.name}; pass this model's "
                        "fusion.json of `dear fuse`, or leave --fusion out")
    return torch.tensor(alpha, dtype=torch.float32)


# --- scoring -----------------------------------------------------------------------

class _Images(torch.utils.data.Dataset):
    """(index, pixels [3, S, S] or None, error or None): a bad image is a row of its own, never a crash."""

    def __init__(self, paths: list[str], transform):
        self.paths, self.transform = paths, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        from PIL import Image

        path = self.paths[index]
        try:
            with Image.open(path) as image:
                return index, self.transform(image.convert("RGB")), None
        except OSError as err:  # missing, truncated, not an image (PIL's UnidentifiedImageError is an OSError)
            why = "not found" if isinstance(err, FileNotFoundError) else \
                f"not a readable image ({' '.join(str(err).split()) or type(err).__name__})"
            return index, None, f"{path}: {why}"


def _collate(items: list) -> list:
    return items


@torch.no_grad()
def score(model, paths: list[str], classnames: list[str], rules: list[str], alpha: torch.Tensor, params: Params,
          precision, k: int) -> list[dict]:
    """One row per path: its top-k classes, probabilities and their rules, or its error."""
    from dear.scoring import evaluation

    loader = torch.utils.data.DataLoader(_Images(paths, evaluation.eval_transform(model)),
                                         batch_size=params.evaluate.batch_size, collate_fn=_collate,
                                         num_workers=cpus.processes(params.compute.workers))
    rows: list[dict | None] = [None] * len(paths)
    for batch in track(loader, description="predicting", total=len(loader)):
        good = [(index, pixels) for index, pixels, _ in batch if pixels is not None]
        for index, _, error in batch:
            if error is not None:
                rows[index] = {"path": paths[index], "classes": [], "probabilities": [], "rules": [], "error": error}
        if not good:
            continue
        pixels = torch.stack([p for _, p in good]).to(model.device)  # [B, 3, S, S]
        with precision.autocast(training=False):
            features = model.encode(model.image_prefix(pixels))  # [B, S+1, E]
        logits = model.logits(features, classnames)  # [B, S+1, C]
        output = by_rule(model, logits, alpha.to(logits.device), rules, params.fusion.novel)  # [B, C]
        top = output.float().softmax(-1).topk(k, dim=-1)
        for (index, _), values, picks in zip(good, top.values.tolist(), top.indices.tolist()):
            rows[index] = {"path": paths[index], "classes": [classnames[i] for i in picks],
                           "probabilities": values, "rules": [rules[i] for i in picks], "error": None}
    return rows


def by_rule(model, logits: torch.Tensor, alpha: torch.Tensor, rules: list[str], novel: str) -> torch.Tensor:
    """Prediction logits [B, C] from stream logits [B, S+1, C]: column c from the method's output under rules[c].

    A method scores each class on its own (its text features are per class), so a seen class's column is what
    `evaluate` computes for it among the base classes, whatever else the list holds.
    """
    seen = torch.tensor([rule == SEEN for rule in rules], device=logits.device)  # [C]
    if seen.all():
        return model.output(logits, alpha, True, novel)
    if not seen.any():
        return model.output(logits, alpha, False, novel)
    return torch.where(seen, model.output(logits, alpha, True, novel), model.output(logits, alpha, False, novel))


def as_csv(rows: list[dict], k: int) -> str:
    """path, class_1, probability_1, rule_1, ..., class_k, probability_k, rule_k, error."""
    buffer = text_io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    kinds = ("class", "probability", "rule")
    writer.writerow(["path", *[f"{kind}_{i}" for i in range(1, k + 1) for kind in kinds], "error"])
    for row in rows:
        cells = [value for triple in zip(row["classes"], (f"{p:.6f}" for p in row["probabilities"]), row["rules"])
                 for value in triple]
        writer.writerow([row["path"], *cells, *[""] * (len(kinds) * k - len(cells)), row["error"] or ""])
    return buffer.getvalue()
