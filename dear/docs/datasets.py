"""The dataset table of docs/datasets.md, written from the built-in declarations (`dear.data.coop.SPECS`)."""

from __future__ import annotations

from pathlib import Path

from dear.docs.format import table


def coop_datasets(root: Path) -> str:
    """Every built-in `--dataset` prepare knows: its folder, its format, the file that defines it, its images, its
    classes."""
    from dear.data.coop import SPECS

    rows = []
    for name, spec in SPECS.items():
        images = f"`{spec.image_dir}/`" if spec.image_dir else "the folder itself"
        kind = "test only" if spec.test_only else ("validation from train" if spec.val_from_train else "")
        rows.append([f"`{name}`", f"`{spec.format}`", f"`{spec.split_file}`", images, str(spec.coop_classes or "—"),
                     kind])
    return table(["`--dataset` (folder)", "format", "defines the classes and splits", "images", "classes (CoOp)",
                  "note"], rows)


def text_bank(root: Path) -> str:
    """How many texts the packaged text bank holds, per concept."""
    lines = (root / "dear/resources/text_bank.tsv").read_text().splitlines()[1:]
    counts: dict[str, int] = {}
    for line in lines:
        concept = line.rsplit("\t", 1)[1]
        counts[concept] = counts.get(concept, 0) + 1
    per_concept = ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"`dear/resources/text_bank.tsv` holds {len(lines):,} texts in {len(counts)} concepts: {per_concept}."
