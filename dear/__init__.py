"""DeAR: fine-grained CLIP adaptation by decomposing attention head roles."""

__version__ = "0.1.0"
