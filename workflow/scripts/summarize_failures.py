"""List the jobs a Snakemake run left failed: why each stopped, and the log files to read (stdlib only).

    python workflow/scripts/summarize_failures.py .snakemake/log/<run>.snakemake.log

The Snakefile's `onerror:` handler calls it with Snakemake's log of the run, so
a long run (hundreds of cluster jobs, --keep-going) ends with one short list
instead of failures scattered through its output. A job that failed and then
succeeded on a retry is not listed. Each job's "why" is the last line of its
log: every `dear` stage ends its log with the cause, even when killed (a
parent process writes it then, dear/runtime/supervise.py). A log left empty (the job
died with its parent, or before its first line) gets what Snakemake saw of
the command's end instead: the signal that killed it or its exit code.
Exit code 0 (it only reports).
"""

from __future__ import annotations

import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

ERROR = re.compile(r"^Error in rule (\S+):$")
FINISHED = re.compile(r"^Finished jobid: (\d+) ")
FIELD = re.compile(r"^ {4}(\w+): (.*)$")
DUMP_RULE = "=" * 80  # Snakemake prints each failed job's log file between two such lines
# Before its "Error in rule" block, the local executor says how the job's command ended
DIED = re.compile(r"^Command .* (died with <Signals\.(\w+): \d+>|returned non-zero exit status (\d+))\.$")


@dataclass
class Failure:
    rule: str
    fields: dict[str, str] = field(default_factory=dict)
    ending: str | None = None  # how the command ended, as Snakemake saw it (local executor)

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
    ending = None
    for line in top_level_lines(log_text.splitlines()):
        if match := DIED.match(line):
            ending = _ending(match)
        if match := ERROR.match(line):
            current, ending = Failure(match.group(1), ending=ending), None
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


def _ending(match: re.Match) -> str:
    """'killed by SIGKILL' or 'exit code 1' (a shell reports a command killed by signal N as 128 + N)."""
    if match.group(2):
        return f"killed by {match.group(2)}"
    code = int(match.group(3))
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"exit code {code} (killed by {signal.Signals(code - 128).name})"
    return f"exit code {code}"


def why(failure: Failure, project: Path) -> str:
    """The cause a job's logs end with (paths relative to `project`), else what Snakemake saw of the command's end."""
    for path in failure.logs:
        try:
            text = (project / path).read_text(errors="replace")
            lines = [line.strip() for line in text.splitlines() if line.strip()]
        except OSError:
            continue
        if lines:
            return lines[-1].removeprefix("error: ")
    seen = f"; the command ended with {failure.ending}" if failure.ending else ""
    return f"its log is empty or missing: the job ended before it wrote a line{seen}"


def summary(failures: list[Failure], project: Path = Path(".")) -> str:
    if not failures:
        return "No failed jobs."
    lines = [f"{len(failures)} failed job(s): why each stopped, and the logs to read:"]
    for failure in failures:
        outputs = failure.fields.get("output", "").split(", ")[0]
        where = f" [Slurm job {failure.fields['external_jobid']}: {failure.slurm_status or 'failed'}]" \
            if "external_jobid" in failure.fields else ""
        lines.append(f"  rule {failure.rule} -> {outputs}{where}")
        lines.append(f"      why: {why(failure, project)}")
        lines += [f"      {path}" for path in failure.logs]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: summarize_failures.py SNAKEMAKE_LOG", file=sys.stderr)
        return 2
    log = Path(argv[0])
    print(summary(failed_jobs(log.read_text(errors="replace")), project_of(log)))
    return 0


def project_of(log: Path) -> Path:
    """Where Snakemake ran (job logs are relative to it): above .snakemake/log/, else here."""
    resolved = log.resolve()
    return resolved.parents[2] if resolved.parent.name == "log" and resolved.parents[1].name == ".snakemake" else Path(".")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
