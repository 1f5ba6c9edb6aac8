"""Docs that cannot drift: Markdown blocks written from the files they describe.

A page (README.md or docs/*.md) marks a block with two comments:

    <!-- generated: params train -->
    ... written by `python -m dear.docs`, never by hand ...
    <!-- end generated -->

`python -m dear.docs` rewrites every block from params.yaml, configs/*.yaml,
the Snakemake profiles and the demo's snapshot (docs/demo/); `--check` only
lists the stale blocks, as tests/docs/test_docs.py does. After `make demo`,
`python -m dear.docs --snapshot` copies the run's numbers into docs/demo/,
draws docs/img/base_novel.png from them and rewrites the blocks that show them.
"""
