"""The failure summary lists jobs that failed for good, with their logs, from Snakemake's log of a run."""

import subprocess
import sys

import pytest

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
    """The script run where Snakemake ran (job logs are relative to it), on `text` as the run's log."""
    log = tmp_path / "run.snakemake.log"
    log.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), str(log)], capture_output=True, text=True, cwd=tmp_path)


def test_lists_only_the_job_that_failed_for_good_with_both_logs_and_the_last_line_of_the_job_log(tmp_path):
    (tmp_path / "logs/prepare").mkdir(parents=True)
    (tmp_path / "logs/prepare/eurosat.log").write_text(
        "2026-12-02 16:37:01,000 dear.prepare: eurosat: 27000 images\n"
        "error: killed by SIGKILL after 12 s, in prepare, at exists eurosat, 3 of 8; peak memory 7.91 GB\n\n")
    result = summarize(tmp_path, LOG)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "1 failed job(s): why each stopped, and the logs to read:",
        "  rule prepare -> data/eurosat/manifest.parquet [Slurm job 5: FAILED]",
        "      why: killed by SIGKILL after 12 s, in prepare, at exists eurosat, 3 of 8; peak memory 7.91 GB",
        "      logs/prepare/eurosat.log",
        "      /p/logs/slurm/rule_prepare/eurosat/5.log",
    ]


# Cut from a Snakemake 9.27 log of a local run whose job died with no line in its log
KILLED = """[Fri Dec  4 14:18:17 2026]
localrule train_transfer:
    log: logs/train_transfer/mmrl.log
    jobid: 7
RuleException:
CalledProcessError in file "/p/workflow/rules/train.smk", line 45:
Command 'set -euo pipefail;  dear train --method mmrl --log logs/train_transfer/mmrl.log' {how}.
[Fri Dec  4 14:18:17 2026]
Error in rule train_transfer:
    message: None
    jobid: 7
    output: transfer/mmrl/train/seed1/model.pt
    log: logs/train_transfer/mmrl.log (check log file(s) for error details)
    shell:
        dear train --method mmrl --log logs/train_transfer/mmrl.log
        (command exited with non-zero exit code)
Exiting because a job execution failed. Look above for error messages
"""


@pytest.mark.parametrize("how, seen", [
    ("died with <Signals.SIGKILL: 9>", "killed by SIGKILL"),
    ("returned non-zero exit status 137", "exit code 137 (killed by SIGKILL)"),
    ("returned non-zero exit status 1", "exit code 1"),
])
def test_an_empty_job_log_gets_what_snakemake_saw_of_the_command_s_end(tmp_path, how, seen):
    (tmp_path / "logs/train_transfer").mkdir(parents=True)
    (tmp_path / "logs/train_transfer/mmrl.log").write_text("")
    lines = summarize(tmp_path, KILLED.format(how=how)).stdout.splitlines()
    assert lines[1:3] == ["  rule train_transfer -> transfer/mmrl/train/seed1/model.pt",
                          f"      why: its log is empty or missing: the job ended before it wrote a line; the command "
                          f"ended with {seen}"]


def test_a_run_without_failures_says_so(tmp_path):
    assert summarize(tmp_path, "Finished jobid: 1 (Rule: prepare)\n").stdout == "No failed jobs.\n"


def test_job_logs_are_read_where_snakemake_ran_whatever_the_current_folder(tmp_path):
    """Snakemake's log lies in <project>/.snakemake/log/: the job logs it names are relative to <project>."""
    project = tmp_path / "project"
    (project / ".snakemake/log").mkdir(parents=True)
    (project / "logs/train_transfer").mkdir(parents=True)
    (project / "logs/train_transfer/mmrl.log").write_text("error: out of memory after 3 s, in train\n")
    log = project / ".snakemake/log/run.snakemake.log"
    log.write_text(KILLED.format(how="returned non-zero exit status 1"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([sys.executable, str(SCRIPT), str(log)], capture_output=True, text=True, cwd=elsewhere).stdout
    assert "      why: out of memory after 3 s, in train" in out.splitlines()
