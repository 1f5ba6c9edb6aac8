"""Run the pipeline through the one-node Slurm of scripts/slurm-local.sh, and read what Slurm saw.

The cluster has no accounting database (`sacct` does not work), so the record of
each job is `scontrol show job`: slurm.conf keeps finished jobs for a day (MinJobAge).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.engines import BIN, engine_env

PROFILE = Path("workflow") / "profiles" / "slurm"   # the shipped profile, as users run it (relative to a project)
# what a cluster without accounting needs on top (scalar options: they replace nothing of the profile's)
NO_ACCOUNTING = ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1"]
# a test's chains of short jobs: poll every 2 s instead of 10 (a scalar option: replaces nothing of the profile's)
FAST_POLLING = ["--seconds-between-status-checks", "2"]
LOCAL_RULES = {"all"}             # rules without a command: Snakemake runs them itself, nothing is submitted
SNAKEMAKE_TIMEOUT_S = 240         # bound of each snakemake run (timeout -s INT: the executor ignores TERM)

SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\S+) \(log: (\S+)\)")
RUN_ID = re.compile(r"SLURM run ID: (\S+)")
COMPLETE_LOG = re.compile(r"Complete log\(s\): (\S+)")


def slurm_env() -> dict:
    return dict(engine_env(), SLURM_CONF=os.environ.get("SLURM_CONF", "/tmp/dear-slurm/etc/slurm.conf"))


def slurm(*command: str) -> str:
    result = subprocess.run(command, env=slurm_env(), capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stderr.strip()}")
    return result.stdout


def slurm_jobs() -> dict[str, dict[str, str]]:
    """{Slurm job id: {field: value}} for every job Slurm remembers (`scontrol -o show job`)."""
    jobs = {}
    for line in slurm("scontrol", "-o", "show", "job").splitlines():
        record = dict(re.findall(r"(?:^| )([\w/:]+)=(.*?)(?= [\w/:]+=|$)", line.strip()))
        if "JobId" in record:
            jobs[record["JobId"]] = record
    return jobs


def memory_mb(text: str) -> int:
    """Slurm's memory display in MB: '32000M' -> 32000, '62.50G' -> 64000."""
    scale = {"M": 1, "G": 1024, "T": 1024 ** 2}[text[-1]]
    return round(float(text[:-1]) * scale)


def gpu_rules(profile: dict) -> set[str]:
    return {rule for rule, resources in profile.get("set-resources", {}).items() if resources.get("gpu")}


def requested_mem_mb(profile: dict, rule: str, attempt: int) -> int:
    """What the profile asks for `rule` on `attempt` (the expression Snakemake evaluates)."""
    return eval(str(profile["set-resources"][rule]["mem_mb"]), {"attempt": attempt})


@dataclass
class Run:
    """What one `snakemake --executor slurm` run printed."""

    returncode: int
    output: str
    run_id: str | None = None                                    # Slurm job name of every job of the run
    submitted: dict[str, str] = field(default_factory=dict)     # Slurm job id -> Slurm log path
    planned: dict[str, int] = field(default_factory=dict)       # rule -> jobs in the DAG
    log_file: Path | None = None                                # Snakemake's own log of the run

    @classmethod
    def parse(cls, returncode: int, output: str, project: Path) -> "Run":
        run_id = RUN_ID.search(output)
        log_file = COMPLETE_LOG.search(output)
        return cls(returncode, output, run_id.group(1) if run_id else None,
                   {slurm_id: log for _, slurm_id, log in SUBMITTED.findall(output)},
                   job_stats(output), project / log_file.group(1) if log_file else None)

    def remote_jobs_planned(self) -> int:
        return sum(count for rule, count in self.planned.items() if rule not in LOCAL_RULES)


def submissions(output: str) -> list[tuple[str, str]]:
    """(Slurm job id, Slurm log) of each submission in a run's output so far, in order."""
    return [(slurm_id, log) for _, slurm_id, log in SUBMITTED.findall(output)]


def job_stats(output: str) -> dict[str, int]:
    """{rule: count} from the first 'Job stats:' table Snakemake prints."""
    if "Job stats:" not in output:
        return {}
    stats = {}
    for line in output.split("Job stats:", 1)[1].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] != "total":
            stats[parts[0]] = int(parts[1])
    return stats


def snakemake_command(*args: str, timeout: int = SNAKEMAKE_TIMEOUT_S) -> list[str]:
    return ["timeout", "-s", "INT", str(timeout), str(BIN / "snakemake"), "--profile", str(PROFILE), *NO_ACCOUNTING,
            *FAST_POLLING, *args]


def run_snakemake(project: Path, *args: str) -> Run:
    result = subprocess.run(snakemake_command(*args), cwd=project, env=slurm_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=SNAKEMAKE_TIMEOUT_S + 60)
    return Run.parse(result.returncode, result.stdout, project)


def start_snakemake(project: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """A snakemake run in the background; its output goes to the returned file."""
    output = project / "snakemake-output.txt"
    with open(output, "w") as handle:
        process = subprocess.Popen(snakemake_command(*args), cwd=project, env=slurm_env(),
                                   stdout=handle, stderr=subprocess.STDOUT, text=True)
    return process, output


def wait_for(what: str, condition, timeout_s: float = 120.0, every_s: float = 0.25):
    """Poll `condition()` until it returns something truthy; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def fail_with_output(run: Run, message: str) -> str:
    return f"{message}\n--- snakemake output (tail) ---\n{run.output[-4000:]}"


def slurm_available() -> bool:
    return shutil.which("scontrol") is not None
