"""Models: the one module touching open_clip internals, head decomposition, DeAR, baselines."""
