"""`dear profile` end to end on a tiny random backbone and fake images: tables, picture, bad inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import open_clip
import pyarrow as pa
import pytest
import torch
import yaml
from PIL import Image
from typer.testing import CliRunner

import dear.model.clip  # noqa: F401  (registers the embedded architectures)
from dear.cli import app
from dear.data.manifest import MANIFEST_SCHEMA
from dear.runtime.io import read_parquet, read_provenance, write_parquet
from dear.stages.profile import HEAD_CONCEPTS_SCHEMA, HEAD_TEXTS_SCHEMA, ROLES_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
N_IMAGES = 24
BANK = [("a red thing", "color"), ("a blue thing", "color"), ("a green background", "color"),
        ("a yellow image", "color"), ("a circle", "shape"), ("a square", "shape"), ("a star", "shape"),
        ("a striped pattern", "texture"), ("a dotted pattern", "texture"), ("a grid pattern", "texture"),
        ("a photo of a dog", "object"), ("a photo of a cat", "object"), ("a photo of a car", "object"),
        ("at the top left", "position"), ("at the bottom right", "position"), ("a beach", "scene"),
        ("a forest", "scene"), ("two things", "count"), ("a sketch", "style"), ("made of wood", "material")]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Backbone folder (random dear-world-tiny), manifest, images, bank and params in one folder."""
    root = tmp_path_factory.mktemp("profile")
    torch.manual_seed(0)
    model = open_clip.create_model("dear-world-tiny", pretrained=None)
    (root / "backbone").mkdir()
    torch.save(model.state_dict(), root / "backbone" / "model.pt")
    (root / "backbone" / "card.json").write_text(json.dumps({"arch": "dear-world-tiny"}))
    rng = np.random.default_rng(0)
    paths = []
    for i in range(N_IMAGES + 6):
        path = root / "images" / f"{i:03d}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    n = len(paths)
    write_parquet(root / "manifest.parquet", pa.table({
        "path": paths, "label": [i % 2 for i in range(n)], "classname": [["a", "b"][i % 2] for i in range(n)],
        "split": ["train"] * N_IMAGES + ["test"] * 6, "subset": ["base"] * n, "subset_label": [i % 2 for i in range(n)],
        "imagenet_label": [None] * n, "width": [32] * n, "height": [32] * n, "sha256": [None] * n,
    }), MANIFEST_SCHEMA)
    (root / "bank.tsv").write_text("text\tconcept\n" + "".join(f"{t}\t{c}\n" for t, c in BANK))
    write_params(root, "params.yaml")
    return root


def write_params(root: Path, name: str, compute: dict | None = None, **profile) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["profile"].update(dict(dataset=raw["data"]["datasets"][0], split="train", max_images=N_IMAGES, batch_size=10, layers=2,
                               svd_rank=8, texts_per_head=4, text_bank=str(root / "bank.tsv")))
    raw["profile"].update(profile)
    raw["compute"].update(compute or {"device": "cpu"})
    raw["data"]["root"] = str(root / "data")  # no world's attributes there: the ablation is off, wherever tests run
    path = root / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def profile(root: Path, out: str, params: str = "params.yaml", manifest: str = "manifest.parquet"):
    return CliRunner().invoke(app, ["profile", "--params", str(root / params), "--backbone", str(root / "backbone"),
                                    "--manifest", str(root / manifest), "--out", str(root / out)])


def test_profile_writes_every_table(world):
    result = profile(world, "roles")
    assert result.exit_code == 0, result.output
    out = world / "roles"
    roles = read_parquet(out / "roles.parquet", ROLES_SCHEMA).to_pylist()
    assert [(r["layer"], r["head"]) for r in roles] == [(layer, h) for layer in (1, 2) for h in range(4)]
    for row in roles:
        assert row["role"] in ("attribute", "generalization", "mixed")
        assert row["mask_role"] == ("generalization" if row["role"] == "attribute" and row["concept"] not in
                                    ("color", "shape", "texture", "object", "position") else row["role"])
        assert row["n_images"] == N_IMAGES and len(row["model_sha256"]) == 64 and len(row["text_bank_sha256"]) == 64
    assert {r["role"] for r in roles} >= {"attribute", "generalization"}  # quartiles of 8 heads
    concepts = read_parquet(out / "head_concepts.parquet", HEAD_CONCEPTS_SCHEMA).to_pandas()
    assert np.allclose(concepts.groupby(["layer", "head"]).probability.sum(), 1.0)
    texts = read_parquet(out / "head_texts.parquet", HEAD_TEXTS_SCHEMA).to_pandas()
    assert len(texts) == 8 * 4 and list(texts["rank"][:4]) == [1, 2, 3, 4]
    assert set(texts.text) <= {t for t, _ in BANK}
    first = roles[0]
    p = concepts[(concepts["layer"] == 1) & (concepts["head"] == 0)].set_index("concept")["probability"]
    assert p[first["concept"]] == pytest.approx(first["concept_share"]) == p.max()
    assert (out / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    assert "| attribute |" in (out / "roles.md").read_text()
    assert read_provenance(out / "roles.parquet")["params"]["svd_rank"] == 8


def test_profile_is_deterministic(world):
    assert profile(world, "again_a").exit_code == 0
    assert profile(world, "again_b").exit_code == 0
    for name in ("roles.parquet", "head_concepts.parquet", "head_texts.parquet", "roles.md"):
        assert (world / "again_a" / name).read_bytes() == (world / "again_b" / name).read_bytes(), name


def compare_roles(world, a: str, b: str, rtol: float) -> None:
    """The same heads, roles, concepts and picked texts, entropies (4 decimals) equal; shares and variances to `rtol`."""
    first, second = (read_parquet(world / out / "roles.parquet", ROLES_SCHEMA).to_pandas() for out in (a, b))
    key = ["layer", "head", "role", "concept", "mask_role", "entropy_bits"]
    assert first[key].equals(second[key])
    assert np.allclose(first.concept_share, second.concept_share, rtol=rtol, atol=1e-9)
    texts = [read_parquet(world / out / "head_texts.parquet", HEAD_TEXTS_SCHEMA).to_pandas() for out in (a, b)]
    assert texts[0][["layer", "head", "rank", "text", "concept"]].equals(texts[1][["layer", "head", "rank", "text", "concept"]])
    assert np.allclose(texts[0].variance_explained, texts[1].variance_explained, rtol=rtol, atol=1e-9)


MANY = max(2, min(8, len(os.sched_getaffinity(0))))  # 2 here; more where there are more cores


def test_the_same_roles_on_one_and_on_two_threads(world, monkeypatch):
    """`dear --threads N profile`: the thread count a job is given (1, and 2 or more) does not change its roles."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # dear.compute.cpus sets it for the job: restored after the test
    try:
        for threads in (1, MANY):
            result = CliRunner().invoke(app, ["--threads", str(threads), "profile", "--params", str(world / "params.yaml"),
                                              "--backbone", str(world / "backbone"), "--manifest",
                                              str(world / "manifest.parquet"), "--out", str(world / f"threads{threads}")])
            assert result.exit_code == 0, result.output
            assert f"profiling on cpu, fp32, {threads} threads" in result.stderr
    finally:
        torch.set_num_threads(1)
    compare_roles(world, "threads1", f"threads{MANY}", rtol=1e-6)


@pytest.mark.gpu
def test_gpu_roles_match_cpu_roles(world):
    """The same heads, roles, concepts and picked texts on CUDA (fp32, TF32 off) as on the CPU."""
    write_params(world, "cuda.yaml", compute={"device": "cuda", "workers": 2})
    assert profile(world, "roles_cpu").exit_code == 0
    result = profile(world, "roles_cuda", params="cuda.yaml")
    assert result.exit_code == 0, result.output
    compare_roles(world, "roles_cpu", "roles_cuda", rtol=1e-4)  # a GPU's fp32 sums: ~1e-6 of a value


def assert_clean_failure(result, out: Path, phrase: str) -> None:
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and phrase in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("settings, phrase", [
    (dict(svd_rank=30, texts_per_head=4), "svd_rank: rank 30 needs at least 31 images"),
    (dict(layers=3), "profile.layers: asked for the last 3 layers but the image tower has 2"),
    (dict(split="val"), "no images in split 'val'"),
    (dict(roles=dict(mode="absolute", low=2.0, high=1.0)), "profile.roles: low (2.0) must be below high (1.0)"),
])
def test_bad_settings_fail_cleanly(world, settings, phrase):
    name = f"bad_{abs(hash(phrase))}.yaml"
    write_params(world, name, **settings)
    assert_clean_failure(profile(world, "bad_out", params=name), world / "bad_out", phrase)


def test_bank_with_an_unknown_concept_fails_cleanly(world):
    bad = world / "bad_bank.tsv"
    bad.write_text("text\tconcept\na red thing\tcolor\na dog\tanimal\n")
    write_params(world, "bad_bank.yaml", text_bank=str(bad))
    assert_clean_failure(profile(world, "bad_out", params="bad_bank.yaml"), world / "bad_out",
                         "line 3: unknown concept 'animal'")


def test_missing_manifest_fails_cleanly(world):
    assert_clean_failure(profile(world, "bad_out", manifest="nope.parquet"), world / "bad_out", "nope.parquet")


@pytest.mark.slow
@pytest.mark.xdist_group("minilm")
def test_cluster_mode_labels_picks_with_named_clusters(world):
    write_params(world, "cluster.yaml", concepts=dict(source="cluster", allowed=list(dict.fromkeys(c for _, c in BANK)),
                                                      min_cluster_size=2, min_samples=1))
    result = profile(world, "roles_cluster", params="cluster.yaml")
    assert result.exit_code == 0, result.output
    texts = read_parquet(world / "roles_cluster" / "head_texts.parquet", HEAD_TEXTS_SCHEMA).to_pandas()
    allowed = {c for _, c in BANK} | {"other"}
    assert set(texts.concept) <= allowed and len(set(texts.concept)) >= 2
    concepts = read_parquet(world / "roles_cluster" / "head_concepts.parquet", HEAD_CONCEPTS_SCHEMA).to_pandas()
    assert "other" in set(concepts.concept)


def test_unreadable_image_fails_cleanly(world, tmp_path):
    rows = read_parquet(world / "manifest.parquet", MANIFEST_SCHEMA).to_pylist()
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    rows[0]["path"] = str(broken)
    write_parquet(world / "broken_manifest.parquet", pa.Table.from_pylist(rows, MANIFEST_SCHEMA), MANIFEST_SCHEMA)
    write_params(world, "two_workers.yaml", compute={"device": "cpu", "workers": 2})  # the error comes from a worker
    assert_clean_failure(profile(world, "bad_out", params="two_workers.yaml", manifest="broken_manifest.parquet"),
                         world / "bad_out", "broken.png: not a readable image")
