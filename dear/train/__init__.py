"""Training: few-shot data with CoOp's augmentations, checkpoints, the one trainer of every method."""
