"""Models: the one module touching open_clip internals, head decomposition, DeAR, baselines."""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def without_transformers():
    """Import open_clip without HuggingFace transformers (0.65 s of every job's ~3 s of imports here).

    open_clip imports transformers only for its HF text towers, which DeAR cannot recompose anyway
    (`internals.text_tower` refuses them); it treats a failed import as "not installed". The block
    lasts for the import alone: transformers imports normally afterwards (the concept clustering's
    sentence-transformers), and where it was imported before, nothing changes.
    """
    blocked = "transformers" not in sys.modules
    if blocked:
        sys.modules["transformers"] = None  # `import transformers` raises ImportError
    try:
        yield
    finally:
        if blocked and sys.modules.get("transformers", 0) is None:
            del sys.modules["transformers"]
