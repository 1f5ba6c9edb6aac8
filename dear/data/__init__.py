"""Datasets: declarations (built in and one's own), their format readers and shared checks, Dassl few-shot
sampling, the embedded world. Nothing here imports `dear.config.params` or `dear.methods`: the params schema calls
the data layer's checks, never the reverse (tests/data/test_data_layer.py)."""
