"""`dear prepare`: index one dataset into a manifest and few-shot tables.

Reads `<data.root>/<dataset>/` in CoOp's layout (see `dear.data.coop`) or a
dataset of one's own declared under `data.custom` (`dear.data.custom`), both
through `dear.data.datasets`, checks the images as `data.verify` asks (a
dataset of one's own also for truncated files and, by content, for the same
image in two splits: `dear.data.content`), and writes into the output folder `manifest.parquet`,
`excluded.parquet` and one `fewshot-seed<S>.parquet` per seed in `data.seeds`
(schemas in `dear.data.manifest`); a dataset of `study.few_shot` also gets one
`fewshot-shots<K>-seed<S>.parquet` per shot count K and seed: Dassl's draw for
K (the picks depend on K, as the authors' `shot_K-seed_S.pkl`). Everything is read and checked before the
first file is written, and the folder is replaced as a whole
(`dear.runtime.io.output_folder`), so bad input or a kill leaves the previous folder
or none, and a table of an earlier seed list never survives beside new ones.

Whatever `data.verify` says for the rest, the images picked into the
few-shot tables are decoded (they are few, and a truncated training shot
would otherwise surface mid-training), and every class must keep at least
one training image.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dear.data import content, datasets, fewshot, verify
from dear.data.declaration import Declaration
from dear.data.listing import Listing
from dear.data.manifest import (EXCLUDED_SCHEMA, FEWSHOT_SCHEMA, MANIFEST_SCHEMA, SPLITS, SUBSETS,
                                excluded_path, fewshot_path, manifest_path)
from dear.errors import DearError
from dear.runtime.io import output_folder, provenance, write_parquet
from dear.config.params import Params

log = logging.getLogger("dear.prepare")


@dataclass(frozen=True)
class Inputs:
    dataset: str  # name in dear.data.coop.SPECS (DATASETS.md folder name or world_*) or in data.custom


@dataclass(frozen=True)
class Outputs:
    folder: Path  # gets manifest.parquet, excluded.parquet, fewshot-seed<S>.parquet
    FILES: ClassVar[tuple[str, ...]] = ("manifest.parquet", "excluded.parquet", "fewshot-seed*.parquet",
                                        "fewshot-shots*-seed*.parquet")


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    data = params.data
    spec, listing = datasets.read_dataset(inputs.dataset, data.root, data.custom)
    _warn_class_count(inputs.dataset, spec, listing)
    check = verify.check_images(listing.paths, data.verify, data.hash_content, data.workers, inputs.dataset,
                                ends=spec.check_content)
    if check.reasons and not data.skip_bad:
        raise DearError(f"{inputs.dataset}: {verify.describe_bad(listing.paths, check.reasons, data.max_listed)}; "
                        "restore or re-download them, or set data.skip_bad: true to drop them")
    if spec.check_content and data.verify != "none":  # verify none reads no file, so no content is compared
        content.refuse_copies(inputs.dataset, listing,
                              content.identical_groups(listing.paths, check, data.workers), data.max_listed)
    counts = few_shot_counts(params, inputs.dataset)
    manifest, tables = decoded_draw(inputs.dataset, spec, listing, check, data, counts)
    excluded = excluded_table(listing, check)

    record = provenance(data, {"split_file": listing.source, "dataset_dir": spec.dataset_dir,
                               **_declared_files(data.custom.get(inputs.dataset))})
    with output_folder(outputs.folder, Outputs.FILES) as folder:
        write_parquet(excluded_path(folder), excluded, EXCLUDED_SCHEMA, record)
        for (seed, shots), table in tables.items():
            write_parquet(fewshot_path(folder, seed, shots), table, FEWSHOT_SCHEMA,
                          {**record, "seed": seed, **({"shots": shots} if shots is not None else {})})
        write_parquet(manifest_path(folder), manifest, MANIFEST_SCHEMA, record)
    main = {seed: table for (seed, shots), table in tables.items() if shots is None}
    _log_summary(inputs.dataset, manifest, excluded, main, outputs.folder)
    _warn_fewer_shots(inputs.dataset, main, data.shots, len(listing.classnames))


def few_shot_counts(params: Params, dataset: str) -> list[int]:
    """The shot counts K whose tables `dataset` gets: study.few_shot's when it is on and lists the dataset."""
    few = params.study.few_shot_on
    return list(few.shots) if few is not None and dataset in few.datasets else []


def _declared_files(entry) -> dict[str, str]:
    """The class-name and base-class files a dataset of one's own names (hashed into provenance)."""
    if entry is None:
        return {}
    return {key: value for key, value in (("classnames", entry.classnames), ("base_classes", entry.base_classes))
            if isinstance(value, str)}


def decoded_draw(name: str, spec: Declaration, listing: Listing, check: verify.ImageCheck,
                 data, counts: list[int] = ()) -> tuple[pa.Table, dict[tuple[int, int | None], pa.Table]]:
    """The manifest and the few-shot tables, every picked image decoded: {(seed, None): data.shots' table,
    (seed, K): the table of each shot count K of `counts`}.

    A pick that does not decode fails the run, or with `data.skip_bad` joins
    the bad files (`check.reasons`, hence excluded.parquet) and the draw is
    made again without it, as if it had never been in the dataset.
    """
    decoded = np.zeros(len(listing.paths), dtype=bool)
    decoded[:] = data.verify == "decode"
    while True:
        keep = np.ones(len(listing.paths), dtype=bool)
        keep[check.bad_rows] = False
        _check_classes_kept(name, spec, listing, keep)
        manifest = manifest_table(listing, check, keep)
        tables = {(seed, shots): fewshot_table(manifest, spec, k, min(k, data.val_shots), seed)
                  for seed in data.seeds for shots, k in [(None, data.shots), *((c, c) for c in counts)]}
        picked = np.flatnonzero(keep)[np.unique(np.concatenate(
            [table["manifest_row"].to_numpy() for table in tables.values()] + [np.zeros(0, np.int64)]))]
        fresh = picked[~decoded[picked]]                                     # listing rows not decoded yet
        decoded[fresh] = True
        found = verify.check_images([listing.paths[row] for row in fresh], "decode", False, data.workers,
                                    f"{name} few-shot picks")
        if not found.reasons:
            return manifest, tables
        bad = {int(fresh[offset]): reason for offset, reason in found.reasons.items()}
        if not data.skip_bad:
            raise DearError(f"{name}: picked as a few-shot image but {verify.describe_bad(listing.paths, bad, data.max_listed)}"
                            "; restore or re-download them, or set data.skip_bad: true to drop them and draw again")
        check.reasons.update(bad)


def manifest_table(listing: Listing, check: verify.ImageCheck, keep: np.ndarray) -> pa.Table:
    """One row per kept image, in listing order (train, val, test; split-file order inside)."""
    labels = listing.labels[keep]                                    # [M]
    is_novel, subset_label = fewshot.base_novel(len(listing.classnames), listing.base)
    width, height = check.width[keep], check.height[keep]
    imagenet = None if listing.imagenet_labels is None else pa.array(listing.imagenet_labels[keep], pa.int32())
    return pa.table({
        "path": _kept(pa.array(listing.paths, pa.string()), keep),
        "label": pa.array(labels, pa.int32()),
        "classname": pa.array(listing.classnames, pa.string()).take(pa.array(labels)),
        "split": pa.array(SPLITS, pa.string()).take(pa.array(listing.splits[keep])),
        "subset": pa.array(SUBSETS, pa.string()).take(pa.array(is_novel[labels].astype(np.int8))),
        "subset_label": pa.array(subset_label[labels], pa.int32()),
        "imagenet_label": imagenet if imagenet is not None else pa.nulls(len(labels), pa.int32()),
        "width": pa.array(width, pa.int32(), mask=width < 0),
        "height": pa.array(height, pa.int32(), mask=height < 0),
        "sha256": _kept(pa.array(check.sha256, pa.string()), keep),
    })


def _kept(column: pa.Array, keep: np.ndarray) -> pa.Array:
    """`column[keep]`, without a copy in the usual case where every row is kept (1.3 M paths are ~100 MB)."""
    return column if keep.all() else column.filter(pa.array(keep))


def excluded_table(listing: Listing, check: verify.ImageCheck) -> pa.Table:
    rows = check.bad_rows
    return pa.table({
        "path": pa.array([listing.paths[row] for row in rows], pa.string()),
        "label": pa.array(listing.labels[rows], pa.int32()),
        "split": pa.array([SPLITS[code] for code in listing.splits[rows]], pa.string()),
        "reason": pa.array([check.reasons[row] for row in rows], pa.string()),
    })


def fewshot_table(manifest: pa.Table, spec: Declaration, shots: int, val_shots: int, seed: int) -> pa.Table:
    """The manifest rows Dassl would pick for `seed`: training shots, then validation shots.

    Test-only sets (domain shift) get an empty table with the same schema, so
    every dataset has the same outputs.
    """
    if spec.test_only:
        return FEWSHOT_SCHEMA.empty_table()
    labels = manifest["label"].to_numpy()
    splits = _split_codes(manifest)
    picked = fewshot.sample_fewshot(labels, splits, shots, val_shots, seed, spec.val_from_train,
                                    train_code=SPLITS.index("train"), val_code=SPLITS.index("val"))
    rows = np.concatenate([picked.train, picked.val])
    use = ["train"] * len(picked.train) + ["val"] * len(picked.val)
    table = manifest.take(pa.array(rows))
    table = table.append_column("fewshot_split", pa.array(use, pa.string()))
    return table.append_column("manifest_row", pa.array(rows, pa.int64()))


def _split_codes(manifest: pa.Table) -> np.ndarray:
    column = manifest["split"].combine_chunks().dictionary_encode()
    codes = np.asarray([SPLITS.index(value) for value in column.dictionary.to_pylist()], dtype=np.int8)
    return codes[column.indices.to_numpy(zero_copy_only=False)]


def _warn_class_count(name: str, spec: Declaration, listing: Listing) -> None:
    n_classes = len(listing.classnames)
    if spec.coop_classes is not None and n_classes != spec.coop_classes:
        log.warning("%s: %d classes, CoOp's copy has %d; fine for a subset, otherwise check %s",
                    name, n_classes, spec.coop_classes, listing.source)


def _check_classes_kept(name: str, spec: Declaration, listing: Listing, keep: np.ndarray) -> None:
    """Every class keeps an image where its shots are drawn from (train; test for test-only sets).

    An empty class would silently get no shots; dropping one would renumber
    the labels away from CoOp's, so `data.skip_bad` cannot drop a whole class.
    """
    split = "test" if spec.test_only else "train"
    used = keep & (listing.splits == SPLITS.index(split))
    counts = np.bincount(listing.labels[used], minlength=len(listing.classnames))
    empty = np.flatnonzero(counts == 0)
    if not empty.size:
        return
    label = empty[0]
    bad = np.bincount(listing.labels[~keep & (listing.splits == SPLITS.index(split))], minlength=len(counts))
    why = "every one is bad" if bad[label] else "none is listed (an empty class folder?)"
    raise DearError(f"{name}: class {label} ({listing.classnames[label]!r}) has no usable {split} image, {why} "
                    f"({empty.size} such classes); restore its images, data.skip_bad cannot drop a whole class")


def _warn_fewer_shots(name: str, tables: dict[int, pa.Table], shots: int, n_classes: int) -> None:
    """A class with fewer training images than data.shots gets all it has: the study is then not `shots`-shot."""
    for seed, table in tables.items():
        train = table.filter(pc.equal(table["fewshot_split"], "train"))
        if not train.num_rows:
            continue  # a test-only dataset: no shots are drawn from it
        counts = np.bincount(train["label"].to_numpy(), minlength=n_classes)
        short = int((counts < shots).sum())
        if short:
            log.warning("%s: data.shots is %d but %d of %d classes have fewer training images, so they get %s shots "
                        "(seed %d); the study is then not %d-shot for them (the report states the shots used)", name,
                        shots, short, n_classes, _span(counts.min(), counts[counts < shots].max()), seed, shots)
        return  # the draws of the other seeds have the same counts


def _span(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low}-{high}"


def _log_summary(name: str, manifest: pa.Table, excluded: pa.Table, tables: dict, folder: Path) -> None:
    found = {row["values"]: row["counts"] for row in pc.value_counts(manifest["split"]).to_pylist()}
    counts = {split: found.get(split, 0) for split in SPLITS}
    log.info("%s: %d images (%s), %d classes -> %s", name, manifest.num_rows,
             ", ".join(f"{k} {v}" for k, v in counts.items()), int(manifest["label"].to_numpy().max()) + 1, folder)
    if excluded.num_rows:
        log.warning("%s: dropped %d bad image(s), listed in %s", name, excluded.num_rows, excluded_path(folder))
    for seed, table in tables.items():
        n_train = pc.sum(pc.equal(table["fewshot_split"], "train")).as_py() or 0
        log.info("%s: seed %d: %d training + %d validation shots%s", name, seed, n_train, table.num_rows - n_train,
                 " (test-only dataset: empty table)" if table.num_rows == 0 else "")
