"""The failure summary lists jobs that failed for good, with their logs, from Snakemake's log of a run."""

import subprocess
import sys

from tests.engines import ROOT

SCRIPT = ROOT / "workflow" / "scripts" / "summarize_failures.py"
RULE = "=" * 80

# Cut from a Snakemake 9.27 log of a Slurm run: job 2 failed; job 1 was cancelled and then succeeded on
# its second attempt; a job log dumped by --show-failed-logs repeats an error block that is not the run's.
LOG = f"""Job 2 has been submitted with SLURM jobid 5 (log: /p/logs/slurm/rule_prepare/eurosat/5.log).
[Wed Dec  2 16:37:15 2026]
Error in rule prepare:
    message: SLURM-job '5' failed, SLURM status is: 'FAILED'. Detailed failure reason unavailable.
    jobid: 2
    output: data/eurosat/manifest.parquet, data/eurosat/fewshot-seed1.parquet
    log: logs/prepare/eurosat.log, /p/logs/slurm/rule_prepare/eurosat/5.log (check log file(s) for error details)
    external_jobid: 5
Logfile /p/logs/slurm/rule_prepare/eurosat/5.log:
{RULE}
Error in rule prepare:
    message: None
    jobid: 0
    output: data/eurosat/manifest.parquet
{RULE}
Error in rule prepare:
    message: SLURM-job '6' failed, SLURM status is: 'CANCELLED'. Detailed failure reason unavailable.
    jobid: 1
    output: data/dtd/manifest.parquet
    log: logs/prepare/dtd.log, /p/logs/slurm/rule_prepare/dtd/6.log (check log file(s) for error details)
    external_jobid: 6
[Wed Dec  2 16:37:30 2026]
Finished jobid: 1 (Rule: prepare)
Exiting because a job execution failed. Look above for error messages
"""


def summarize(tmp_path, text: str) -> subprocess.CompletedProcess:
    log = tmp_path / "run.snakemake.log"
    log.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), str(log)], capture_output=True, text=True)


def test_lists_only_the_job_that_failed_for_good_with_both_logs(tmp_path):
    result = summarize(tmp_path, LOG)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "1 failed job(s); read these logs:",
        "  rule prepare -> data/eurosat/manifest.parquet [Slurm job 5: FAILED]",
        "      logs/prepare/eurosat.log",
        "      /p/logs/slurm/rule_prepare/eurosat/5.log",
    ]


def test_a_run_without_failures_says_so(tmp_path):
    assert summarize(tmp_path, "Finished jobid: 1 (Rule: prepare)\n").stdout == "No failed jobs.\n"
