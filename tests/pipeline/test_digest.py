"""Output digests: what dvc.yaml links stages by (dear/pipeline/digest.py)."""

from pathlib import Path

import yaml

from dear.pipeline.digest import digested_folder, write_digests


def _read(folder: Path) -> dict:
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted((folder / ".digest").glob("*.yaml"))}


def test_digests_change_exactly_when_the_bytes_do(tmp_path):
    out = tmp_path / "out"
    (out / "seed1").mkdir(parents=True)
    (out / "manifest.parquet").write_bytes(b"rows")
    (out / "seed1/model.pt").write_bytes(b"weights")
    write_digests(out, "prepare")
    first = _read(out)
    assert set(first) == {"folder.yaml", "manifest.parquet.yaml"} and first["folder.yaml"]["files"] == 2

    (out / "seed1/model.pt").write_bytes(b"weights")  # rewritten, same bytes: nothing changes
    write_digests(out, "prepare")
    assert _read(out) == first

    (out / "seed1/model.pt").write_bytes(b"other weights")  # a file below: the folder's digest only
    write_digests(out, "prepare")
    second = _read(out)
    assert second["folder.yaml"] != first["folder.yaml"]
    assert second["manifest.parquet.yaml"] == first["manifest.parquet.yaml"]


def test_a_removed_file_takes_its_digest_along(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("[]")
    write_digests(tmp_path, "fuse")
    (tmp_path / "b.json").unlink()
    write_digests(tmp_path, "fuse")
    assert set(_read(tmp_path)) == {"folder.yaml", "a.json.yaml"}


def test_the_digested_folder_holds_every_seed_of_a_job():
    assert digested_folder(Path("runs/dear/ds/train/seed{seed}"), False, "{seed}") == Path("runs/dear/ds/train")
    assert digested_folder(Path("runs/dear/ds/fuse/seed{seed}/fusion.json"), True, "{seed}") == Path("runs/dear/ds/fuse")
    assert digested_folder(Path("backbone"), False, "{seed}") == Path("backbone")
    assert digested_folder(Path("x/fusion.json"), True, "{seed}") == Path("x")
    assert digested_folder(Path("fusion.json"), True, "{seed}") is None  # never the working directory


def test_a_digest_half_written_by_a_killed_run_is_cleared(tmp_path):
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / ".digest").mkdir()
    (tmp_path / ".digest/.folder.yaml.x1.tmp").write_text("half")
    write_digests(tmp_path, "fuse")
    assert not list((tmp_path / ".digest").glob(".*.tmp"))
