"""Where a backbone's weights come from, and fetching them on purpose (`dear fetch-weights`).

`model.pretrained` names one of three sources:
- `embedded`: trained by `dear backbone` and written into its folder;
- a weights file: used where it lies (hashed, never copied);
- an open_clip tag (openai, laion2b_s34b_b88k, ...): a file in open_clip's
  download cache (`model.cache_dir`; null = open_clip's default).
Stages never download. They look a tag's file up in the cache with no
network call and, when it is missing, say in one line to run
`dear fetch-weights` where there is network (a cluster's login node);
`fetch` is the only function here that downloads. Every file found or
fetched is noted in a small record (`record_path`) that `dear check` reads
without importing open_clip.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import urllib.parse
import urllib.request
from pathlib import Path

from dear.model import without_transformers

with without_transformers():
    import open_clip
from open_clip import pretrained as oc_pretrained
from open_clip.constants import HF_SAFE_WEIGHTS_NAME, HF_WEIGHTS_NAME

from dear.errors import DearError
from dear.runtime.io import write_json
from dear.model.weights_record import lookup, record_path

EMBEDDED = "embedded"
FETCH_HINT = "run `dear fetch-weights --params <your params file>` where there is network (e.g. a login node), with the same model.cache_dir"


def tag_config(arch: str, tag: str) -> dict:
    """open_clip's download entry for `arch` + `tag` (url / hf_hub, quick_gelu, ...)."""
    config = open_clip.get_pretrained_cfg(arch, tag)
    if not config:
        known = open_clip.list_pretrained_tags_by_model(arch)
        raise DearError(f"model.pretrained: open_clip has no weights '{tag}' for {arch} (known: {known}); "
                        "fix the tag or pass a local weights file")
    return config


def cached_file(arch: str, tag: str, cache_dir: str | None) -> Path | None:
    """The cached file of a tag, found without any network call; None when it is not there.

    Follows open_clip's own choice (`download_pretrained`): the Hugging Face
    hub entry when there is one (its safetensors twin first), else the URL's
    file under `cache_dir` (default ~/.cache/clip).
    """
    config = tag_config(arch, tag)
    if config.get("hf_hub") and oc_pretrained.has_hf_hub():
        from huggingface_hub import try_to_load_from_cache

        repo, filename = os.path.split(config["hf_hub"])
        for name in _hub_names(filename or HF_WEIGHTS_NAME):
            found = try_to_load_from_cache(repo, name, cache_dir=cache_dir)
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
        return None
    if config.get("url"):
        target = Path(cache_dir or os.path.expanduser("~/.cache/clip")) / os.path.basename(config["url"])
        return target if target.is_file() else None
    return None


def _hub_names(filename: str) -> list[str]:
    """The names open_clip tries on the hub, in its order: the safetensors twin first."""
    if filename == HF_WEIGHTS_NAME:
        return [HF_SAFE_WEIGHTS_NAME, filename]
    if filename.endswith((".bin", ".pth")):
        return [filename[:-4] + ".safetensors", filename]
    return [filename]


def resolve(arch: str, pretrained: str, cache_dir: str | None) -> Path:
    """The weights file of a file path or a tag, offline; a missing file is a one-line error saying what to run."""
    if is_weights_path(pretrained):
        path = Path(pretrained)
        if not path.is_file():
            raise DearError(f"{path}: weights file not found; pass an existing file as model.pretrained")
        return path.absolute()
    found = cached_file(arch, pretrained, cache_dir)
    if found is None:
        where = cache_dir or "open_clip's default cache"
        raise DearError(f"model.pretrained: open_clip weights '{pretrained}' for {arch} are not in {where}; "
                        f"{FETCH_HINT}")
    remember(arch, pretrained, cache_dir, found)
    return found


def fetch(arch: str, tag: str, cache_dir: str | None) -> Path:
    """Download the weights of `tag` into the cache (the network on purpose) and record where they are.

    Where the server cannot be reached (no network, a compute node) it fails at once, in one line: the
    download itself would retry for about a minute, a warning line each time.
    """
    config = tag_config(arch, tag)
    problem = unreachable(download_url(config))
    if problem:
        raise DearError(f"model.pretrained: cannot download weights '{tag}' for {arch}: {problem}; run "
                        "`dear fetch-weights` where there is network (e.g. a login node), with the same model.cache_dir")
    try:
        found = oc_pretrained.download_pretrained(config, cache_dir=cache_dir)
    except Exception as err:  # network and hub failures come in many types
        raise DearError(f"model.pretrained: downloading weights '{tag}' for {arch} failed ({type(err).__name__}: "
                        f"{str(err)[:200]}); check the network or the tag") from err
    if not found or not Path(found).is_file():
        raise DearError(f"model.pretrained: open_clip gave no file for weights '{tag}' of {arch}")
    remember(arch, tag, cache_dir, Path(found))
    return Path(found)


def download_url(config: dict) -> str:
    """Where open_clip would download `config` from: the Hugging Face hub (HF_ENDPOINT) when listed, else its URL."""
    if config.get("hf_hub") and oc_pretrained.has_hf_hub():
        from huggingface_hub import constants

        return constants.ENDPOINT
    return config.get("url", "")


def unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why `url`'s server (or the proxy the environment names for it) cannot be reached; None when it can."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    target = urllib.parse.urlsplit(proxy) if proxy and not urllib.request.proxy_bypass(parts.hostname or "") else parts
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        socket.create_connection((target.hostname, port), timeout=timeout).close()
    except OSError as err:
        return f"{target.hostname}:{port} cannot be reached ({err.strerror or err})"
    return None


def fetch_configured(model, resolve_arch) -> tuple[Path | None, str | None]:
    """(file, sha256) of the `model` section's tag after fetching it; (None, None) when there is nothing to fetch.

    `resolve_arch`: model.arch -> its open_clip name (`dear.model.clip.resolve_arch`, passed in: the loader
    imports this module, not the other way round)."""
    from dear.runtime.io import sha256_file

    if model.pretrained == EMBEDDED or is_weights_path(model.pretrained):
        return None, None
    arch = resolve_arch(model.arch)
    with network_on():
        path = fetch(arch, model.pretrained, model.cache_dir)
    return path, sha256_file(path)


@contextlib.contextmanager
def network_on():
    """The network on purpose, even under HF_HUB_OFFLINE=1 (which huggingface_hub reads once, at import)."""
    from huggingface_hub import constants

    saved = os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"], constants.HF_HUB_OFFLINE = "0", False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved[1]
        if saved[0] is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved[0]


def remember(arch: str, tag: str, cache_dir: str | None, path: Path) -> None:
    """Note the tag's file in the record `dear check` reads (kept if the cache is read-only)."""
    record = record_path(cache_dir)
    if lookup(arch, tag, cache_dir) == path:
        return
    try:
        entries = json.loads(record.read_text()) if record.is_file() else {}
    except (OSError, json.JSONDecodeError):
        entries = {}
    entries[f"{arch}/{tag}"] = str(path)
    try:
        write_json(record, entries)
    except OSError:
        pass  # a read-only cache: the stage still runs; `dear check` will ask for fetch-weights


def is_weights_path(pretrained: str) -> bool:
    """A file path rather than `embedded` or an open_clip tag."""
    return Path(pretrained).exists() or "/" in pretrained or pretrained.endswith(
        (".pt", ".pth", ".bin", ".safetensors"))
