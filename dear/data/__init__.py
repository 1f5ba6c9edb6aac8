"""Datasets: CoOp-layout readers, Dassl few-shot sampling, the embedded world."""
