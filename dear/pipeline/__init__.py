"""The study as the engines run it: its jobs, what each one's outputs record, what a run cost and what a plan will.

- `jobs`: the study's jobs as both engines run them (names, inputs, outputs, their code);
- `codegraph`: the code a job runs, read from the package's imports, and its fingerprints;
- `stale`: outputs made otherwise than the config in use would make them;
- `engines`: what both engines run before a plan (config problems, job files, stale outputs);
- `digest`: the digests of output folders (`<folder>/.digest/*.yaml`) that link DVC's stages;
- `machine_cache`: one embedded world and backbone per machine, whichever engine runs the study;
- `runrecord`: the record of a run, what made its numbers and what each job cost;
- `plan`: `dear plan`, what a config will cost before it runs;
- `compare`: `dear compare`, which numbers moved beyond noise between two runs.

It may import every layer below the stages (`dear.errors`, `dear.compute`, `dear.runtime`, `dear.data`,
`dear.model`, `dear.methods`, `dear.config`, `dear.scoring`, `dear.train`, `dear.report`); the stages, the
command line and the public faces import it, never the reverse (docs/architecture.md).
"""
