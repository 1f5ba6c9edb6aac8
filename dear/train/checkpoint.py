"""Resumable checkpoints: everything a run needs to continue bit for bit.

A checkpoint holds the learnable tensors, the optimizer, scheduler and grad
scaler states, every RNG state, the next step, the log rows so far and the
hash of everything that shapes the result. It lives outside the stage's
declared outputs (neither DVC nor Snakemake deletes it before a rerun), is
written to a temporary sibling and renamed, so a kill or a full disk during
the write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import errno
import logging
import random
from pathlib import Path

import numpy as np
import torch

from dear.runtime import status
from dear.errors import DearError
from dear.runtime.io import atomic_path, leftovers_of, load_torch, remove_leftovers

log = logging.getLogger("dear.train")


def rng_states() -> dict:
    """Every RNG state as tensors, tuples and numbers: what `torch.load(weights_only=True)` accepts."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),  # (version, 625 ints, None)
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict) -> None:
    random.setstate(tuple(states["python"]))
    name, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save(path: Path, state: dict) -> None:
    """Write `state` atomically; a failed write (e.g. a full disk) keeps the previous checkpoint."""
    status.update(checkpoint_file=str(path))
    try:
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
    except OSError as err:
        what = "the disk is full" if err.errno == errno.ENOSPC else f"{err.strerror or err}"
        kept = "the previous checkpoint is kept" if path.is_file() else "no earlier checkpoint exists"
        raise DearError(f"{path}: checkpoint write failed at step {state.get('step')} ({what}); {kept}; "
                        "free space and rerun the same command to resume") from err
    status.update(checkpoint=f"step {state.get('step')}, {path}")  # what a rerun resumes from


def load(path: Path, params_hash: str) -> dict | None:
    """The checkpoint at `path` if it belongs to this exact configuration; None to start afresh.

    Temporary files of a write that a kill interrupted are removed first.
    The file is read with `weights_only=True`: one that asks to run code is refused.
    """
    remove_leftovers(path.parent, leftovers_of(path))
    if not path.is_file():
        return None
    try:
        state = load_torch(path)  # a file that could run code is refused (DearError), never loaded
    except DearError:
        raise
    except Exception as err:  # a damaged file: torch raises many types
        log.warning("%s: unreadable checkpoint (%s); starting afresh", path, type(err).__name__)
        return None
    if not isinstance(state, dict) or state.get("params_hash") != params_hash:
        log.warning("%s: checkpoint made with other params/inputs; starting afresh (it is replaced)", path)
        return None
    log.info("%s: resuming at step %d", path, state["step"])
    status.update(checkpoint=f"step {state['step']}, {path}")
    return state
