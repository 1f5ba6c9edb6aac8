"""Cluster tests run where SLURM_CONF names a Slurm (`make test-cluster` sets it); elsewhere they are skipped.

The default addopts already deselect them (`-m 'not cluster'`); this catches runs that replace `-m`.
"""

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SLURM_CONF"):
        return
    skip = pytest.mark.skip(reason="needs the one-node Slurm: run `make test-cluster`")
    for item in items:
        if "cluster" in item.keywords:
            item.add_marker(skip)
