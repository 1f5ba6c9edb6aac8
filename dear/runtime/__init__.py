"""Running a stage safely: what every stage's process does around its work.

- `io`: atomic writes, whole-folder outputs, Parquet with explicit schemas, hashing, provenance;
- `paramsfile`: which params file the running stage read (what its messages ask to edit);
- `progress`: progress of long loops (a bar on a terminal, lines with rate and time left in a log);
- `status`: where the running stage is and its memory, shared with its watching parent;
- `stops`: the last line of a stage that stopped (interrupted, failed, out of memory, killed);
- `supervise`: the parent that watches a stage and writes that line when it is killed outright.

It imports `dear.errors` and `dear.compute` only (docs/architecture.md, tests/test_architecture.py).
"""
