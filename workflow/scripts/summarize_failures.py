"""List the jobs a Snakemake run left failed, with the log files to read (stdlib only).

    python workflow/scripts/summarize_failures.py .snakemake/log/<run>.snakemake.log

The Snakefile's `onerror:` handler calls it with Snakemake's log of the run, so
a long run (hundreds of cluster jobs, --keep-going) ends with one short list
instead of failures scattered through its output. A job that failed and then
succeeded on a retry is not listed. Exit code 0 (it only reports).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ERROR = re.compile(r"^Error in rule (\S+):$")
FINISHED = re.compile(r"^Finished jobid: (\d+) ")
FIELD = re.compile(r"^ {4}(\w+): (.*)$")
DUMP_RULE = "=" * 80  # Snakemake prints each failed job's log file between two such lines


@dataclass
class Failure:
    rule: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def logs(self) -> list[str]:
        text = self.fields.get("log", "").replace("(check log file(s) for error details)", "")
        return [path.strip() for path in text.split(",") if path.strip()]

    @property
    def slurm_status(self) -> str | None:
        match = re.search(r"SLURM status is: '(\w+)'", self.fields.get("message", ""))
        return match.group(1) if match else None


def top_level_lines(lines: list[str]) -> list[str]:
    """The run's own lines, without the job log files Snakemake dumps between '====' lines."""
    kept, inside = [], False
    for line, following in zip(lines, [*lines[1:], ""]):
        if line == DUMP_RULE:
            inside = not inside
        elif not inside and not (line.startswith("Logfile ") and following == DUMP_RULE):
            kept.append(line)
    return kept


def failed_jobs(log_text: str) -> list[Failure]:
    """Jobs whose last report in the log is an error (in order of their first failure)."""
    failures: dict[str, Failure] = {}
    current: Failure | None = None
    for line in top_level_lines(log_text.splitlines()):
        if match := ERROR.match(line):
            current = Failure(match.group(1))
        elif current is not None and (match := FIELD.match(line)):
            current.fields[match.group(1)] = match.group(2)
            if match.group(1) == "jobid":
                failures.pop(match.group(2), None)  # keep only the latest attempt
                failures[match.group(2)] = current
        elif current is not None and not line.startswith(" "):
            current = None
        if match := FINISHED.match(line):
            failures.pop(match.group(1), None)
    return list(failures.values())


def summary(failures: list[Failure]) -> str:
    if not failures:
        return "No failed jobs."
    lines = [f"{len(failures)} failed job(s); read these logs:"]
    for failure in failures:
        outputs = failure.fields.get("output", "").split(", ")[0]
        where = f" [Slurm job {failure.fields['external_jobid']}: {failure.slurm_status or 'failed'}]" \
            if "external_jobid" in failure.fields else ""
        lines.append(f"  rule {failure.rule} -> {outputs}{where}")
        lines += [f"      {path}" for path in failure.logs]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: summarize_failures.py SNAKEMAKE_LOG", file=sys.stderr)
        return 2
    print(summary(failed_jobs(Path(argv[0]).read_text(errors="replace"))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
