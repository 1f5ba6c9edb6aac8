"""Weights on purpose: `dear fetch-weights` fills the cache, stages only read it and say what to run when it is empty."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml
from open_clip import pretrained as oc_pretrained
from typer.testing import CliRunner

from dear.config.check import check_file
from dear.cli import app
from dear.model import weights
from dear.model.weights_record import lookup
from tests.fake_coop import write_params

REVISION = "0123456789abcdef0123456789abcdef01234567"


def vit_params(tmp_path: Path, **model) -> Path:
    path = write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"])
    raw = yaml.safe_load(path.read_text())
    raw["model"].update({"arch": "ViT-B-16", "pretrained": "openai", "cache_dir": str(tmp_path / "cache"), **model})
    raw["backbone"]["sanity"]["enabled"] = False
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a stage tried the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def fake_hub(calls: list):
    """hf_hub_download as the hub would answer it: no safetensors twin, the .bin into the cache's layout."""
    from huggingface_hub import constants

    def download(repo_id, filename, revision=None, cache_dir=None, **kwargs):
        calls.append((repo_id, filename, constants.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")))
        if filename.endswith(".safetensors"):
            raise FileNotFoundError(f"{repo_id} has no {filename}")
        repo = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(REVISION)
        target = repo / "snapshots" / REVISION / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"fake weights of " + repo_id.encode())
        return str(target)

    return download


def test_missing_weights_say_what_to_run_without_touching_the_network(tmp_path, no_network):
    params = vit_params(tmp_path)
    result = CliRunner().invoke(app, ["backbone", "--params", str(params), "--out", str(tmp_path / "backbone")])
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    assert f"weights 'openai' for ViT-B-16 are not in {tmp_path / 'cache'}" in lines[0]
    assert "run `dear fetch-weights --params" in lines[0] and "login node" in lines[0]
    assert not (tmp_path / "backbone").exists()


def test_fetch_weights_fills_the_cache_that_stages_then_read_offline(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(weights, "unreachable", lambda url: None)  # the fake hub is "reachable"
    monkeypatch.setattr(oc_pretrained, "hf_hub_download", fake_hub(calls))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    params = vit_params(tmp_path)
    assert len(check_file(params)[1]) == 1  # not fetched yet
    result = CliRunner().invoke(app, ["fetch-weights", "--params", str(params)])
    assert result.exit_code == 0, result.output
    snapshot = tmp_path / "cache/models--timm--vit_base_patch16_clip_224.openai/snapshots" / REVISION
    assert str(snapshot / "open_clip_pytorch_model.bin") in result.stdout and "sha256" in result.stdout
    assert [call[1] for call in calls] == ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
    assert all(call[2] is False and call[3] == "0" for call in calls)  # the network was on for the download only
    from huggingface_hub import constants

    assert constants.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"
    assert lookup("ViT-B-16", "openai", str(tmp_path / "cache")) == snapshot / "open_clip_pytorch_model.bin"
    assert check_file(params)[1] == []
    monkeypatch.setattr(oc_pretrained, "hf_hub_download", None)  # stages read the cache without the hub
    assert weights.resolve("ViT-B-16", "openai", str(tmp_path / "cache")) == snapshot / "open_clip_pytorch_model.bin"


@pytest.mark.parametrize("endpoint, why", [("https://nowhere.invalid", "nowhere.invalid:443 cannot be reached"),
                                           ("http://127.0.0.1:9", "127.0.0.1:9 cannot be reached (Connection refused)")])
def test_fetch_weights_without_network_fails_at_once_in_one_line(tmp_path, monkeypatch, endpoint, why):
    """No download is tried (it would retry for ~50 s, a warning line each time): the server is asked first."""
    from huggingface_hub import constants

    def download(*args, **kwargs):
        raise AssertionError("downloaded although the server cannot be reached")

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(oc_pretrained, "hf_hub_download", download)
    result = CliRunner().invoke(app, ["fetch-weights", "--params", str(vit_params(tmp_path))])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: model.pretrained: cannot download weights 'openai' for ViT-B-16: {why}")
    assert "where there is network" in result.stderr


def test_fetch_weights_failures_and_nothing_to_fetch(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(oc_pretrained, "hf_hub_download", broken)
    monkeypatch.setattr(weights, "unreachable", lambda url: None)
    result = CliRunner().invoke(app, ["fetch-weights", "--params", str(vit_params(tmp_path))])
    assert result.exit_code == 1
    assert result.stderr.strip().count("\n") == 0 and "downloading weights 'openai' for ViT-B-16 failed" in result.stderr
    embedded = write_params(tmp_path / "embedded.yaml", root="world", datasets=["world_objects"])
    result = CliRunner().invoke(app, ["fetch-weights", "--params", str(embedded)])
    assert result.exit_code == 0 and "nothing to fetch" in result.stdout
