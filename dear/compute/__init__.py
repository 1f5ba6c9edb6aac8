"""Compute: what the machine is and how the floats are made on it.

- `device`: where the model stages run (the `compute` section: device, precision);
- `cpus`: the CPUs a stage asks for and how it splits them between threads and workers;
- `reproducible`: `compute.reproducible`, torch's CPU kernels capped before torch loads, and what was in force;
- `blas`: `compute.reproducible`'s matrix products, on numpy's OpenBLAS;
- `imports`: which libraries a command imported (served by the warm server or not), for what it records;
- `probe`: the machine and the model facts `dear check` needs, without importing torch;
- `transforms`: what every image pipeline shares (interpolation modes, seeded CPU draws, Dassl's test transform).

The bottom layer beside `dear.errors`: it imports nothing of `dear` but `dear.errors`
(docs/architecture.md, tests/test_architecture.py).
"""
