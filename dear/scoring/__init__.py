"""Scoring: how a trained model's answers become counts, and counts become accuracies.

- `evaluation`: streaming image features and per-class counts, shared by `fuse`, `evaluate` and the
  trainer's feature encoding (`dear.train.features`);
- `results`: the eval table contract (counts) and every accuracy and harmonic mean computed from it.

It imports the layers below it (`dear.errors`, `dear.compute`, `dear.runtime`, `dear.data`, `dear.model`,
`dear.methods`, `dear.config`), never the trainer, the report or the stages (docs/architecture.md).
"""
