"""One embedded world and backbone per machine: Snakemake's output cache restores them into another study."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import tiny_study
from tests.engines import BIN, engine_env, make_project

pytestmark = [pytest.mark.slow]


def snakemake(project: Path, cache: Path, *options: str) -> str:
    result = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *options, "backbone", "--cache"], cwd=project,
                            env=dict(engine_env(), SNAKEMAKE_OUTPUT_CACHE=str(cache)), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def contents(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder` (through links), Snakemake's timestamp left out."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != ".snakemake_timestamp"}


def test_a_second_study_gets_the_world_and_backbone_from_the_cache_byte_identical(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    text = yaml.safe_dump(tiny_study.params(), sort_keys=False)
    first = make_project(tmp_path / "first", text)
    made = snakemake(first, cache)
    assert "Moving output file backbone to cache" in made and len(list(cache.iterdir())) == 2, made[-3000:]
    second = make_project(tmp_path / "second", text)  # another clone on the same machine
    again = snakemake(second, cache)
    assert "Symlinking output file backbone/model.pt from cache" in again, again[-3000:]
    assert not (second / "logs/backbone.log").exists() and not (second / "logs/world.log").exists(), "ran again"
    for name in ("world", "backbone"):
        assert contents(second / name) == contents(first / name) and contents(first / name)
    planned = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "backbone"], cwd=second, env=engine_env(),
                             capture_output=True, text=True, timeout=300)
    assert "Nothing to be done" in planned.stdout + planned.stderr, planned.stdout[-3000:]

    # a backbone remade by hand where the first study's is a link into the cache replaces the link, not the entry
    entry = Path(os.readlink(first / "backbone"))
    kept = contents(entry)
    subprocess.run(["dear", "backbone", "--params", "params.yaml", "--world", "world", "--out", "backbone", "--set",
                    "backbone.steps=5"], cwd=first, env=engine_env(), check=True, capture_output=True, timeout=600)
    assert not (first / "backbone").is_symlink() and contents(entry) == kept
