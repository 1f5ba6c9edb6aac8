#!/usr/bin/env bash
# A one-node Slurm on 127.0.0.1, for tests of the Snakemake Slurm profile.
#
#   scripts/slurm-local.sh install   # apt-get slurm-wlm + munge (idempotent; needs root)
#   scripts/slurm-local.sh start     # munged, slurmctld, slurmd; waits until the node is idle
#   scripts/slurm-local.sh status    # daemons and sinfo
#   scripts/slurm-local.sh env       # prints `export SLURM_CONF=...` for sbatch/squeue/scancel
#   scripts/slurm-local.sh stop      # cancels its jobs, stops only the daemons it started (PID files)
#
# Everything lives under $SLURM_LOCAL_DIR (default /tmp/dear-slurm): config, munge key and socket,
# spool, logs, PID files, and jobcomp.txt (one line per finished job: the record that a job went
# through Slurm, since this cluster has no accounting database and `sacct` does not work).
# Clients find the cluster through SLURM_CONF=$SLURM_LOCAL_DIR/etc/slurm.conf, and through a link at
# /etc/slurm/slurm.conf while it runs (start refuses to replace a config that is not its own link).
# No systemd: each daemon is started by hand, as root (slurmd must be root to launch jobs).
set -euo pipefail

STATE=${SLURM_LOCAL_DIR:-/tmp/dear-slurm}
PORT=${SLURM_LOCAL_PORT:-6817}            # slurmctld port; slurmd listens on PORT+1
CONF=$STATE/etc/slurm.conf
# Also linked from the default path: snakemake-executor-plugin-slurm-jobstep drops SLURM_CONF from
# the environment of the `srun` it runs inside each job, so srun only finds the default config.
SYSTEM_CONF=${SLURM_LOCAL_SYSTEM_CONF:-/etc/slurm/slurm.conf}
NODE=$(hostname -s)
export SLURM_CONF=$CONF

log() { echo "slurm-local: $*" >&2; }
die() { log "$*"; exit 1; }

alive() {  # alive NAME: true when NAME's PID file names a running process called NAME
    local pidfile=$STATE/run/$1.pid pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ -r /proc/$pid/comm && $(<"/proc/$pid/comm") == "$1" ]]
}

cmd_install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null; then
        log "slurm-wlm and munge already installed ($(slurmctld -V))"
        return 0
    fi
    [[ $(id -u) == 0 ]] || die "install needs root (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends slurm-wlm munge
}

write_config() {
    # The node advertises more than the machine has (config_overrides keeps slurmd from draining it),
    # so the Slurm profile's real requests (8 CPUs, 32 GB per GPU stage) fit unchanged; nothing
    # enforces them here (no cgroups), and the jobs share the machine's cores.
    local cpus=${SLURM_LOCAL_CPUS:-16} mem_mb=${SLURM_LOCAL_MEM_MB:-262144}
    cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a one-node test cluster on 127.0.0.1.
ClusterName=dear-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# no cgroups in a container: a job is its process groups (linuxproc loses processes whose parent
# exited before the kill, e.g. a batch-step snakemake busy shutting down), no task binding
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# reject at submission a job no node can ever run (instead of leaving it pending forever)
EnforcePartLimits=ALL
MpiDefault=none
# finished jobs stay visible to squeue for a day: the executor's squeue status polling needs them
MinJobAge=86400
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
MailProg=/bin/true
InactiveLimit=0
SlurmdTimeout=120
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    # a placeholder GPU: requests for --gpus are scheduled; without File= the node goes INVAL
    echo "NodeName=$NODE Name=gpu File=/dev/null Count=1" >"$STATE/etc/gres.conf"
}

start_munge() {
    local key=$STATE/munge/munge.key
    [[ -s $key ]] || { dd if=/dev/urandom of="$key" bs=1024 count=1 status=none; chmod 0400 "$key"; }
    munged --key-file="$key" --socket="$STATE/munge/munge.socket" \
        --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$STATE/munge/munged.seed"
}

wait_until() {  # wait_until SECONDS WHAT COMMAND...: poll COMMAND every 0.5 s
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out waiting for $what; logs in $STATE/log"
        sleep 0.5
    done
}

node_idle() { [[ $(sinfo -h -n "$NODE" -o %t 2>/dev/null) == idle ]]; }

link_system_conf() {  # point the default config path at ours, unless a real config lives there
    if [[ -e $SYSTEM_CONF || -L $SYSTEM_CONF ]] && [[ $(readlink "$SYSTEM_CONF") != "$CONF" ]]; then
        die "$SYSTEM_CONF exists and is not a link to $CONF (a Slurm of this machine, or slurm-local with another SLURM_LOCAL_DIR); stop or move it first"
    fi
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -sfn "$CONF" "$SYSTEM_CONF"
}

unlink_system_conf() {
    if [[ -L $SYSTEM_CONF && $(readlink "$SYSTEM_CONF") == "$CONF" ]]; then rm -f "$SYSTEM_CONF"; fi
}

cmd_start() {
    [[ $(id -u) == 0 ]] || die "start needs root (slurmd launches jobs as their user)"
    command -v slurmctld >/dev/null || die "Slurm is not installed; run: $0 install"
    if alive munged && alive slurmctld && alive slurmd; then
        log "already running (state in $STATE); export SLURM_CONF=$CONF"
        return 0
    fi
    cmd_stop_daemons   # whatever is left of an earlier, partly failed start
    trap 'log "start failed; stopping what it started"; cmd_stop_daemons' EXIT
    rm -rf "$STATE/spool" "$STATE/run" "$STATE/log"   # a fresh cluster: no jobs or logs from an earlier one
    mkdir -p "$STATE"/{etc,run,log,munge,spool/ctld,spool/d}
    chmod 0755 "$STATE/munge"   # munged wants the socket folder traversable by all
    write_config
    link_system_conf
    start_munge
    wait_until 10 munged test -S "$STATE/munge/munge.socket"
    slurmctld -f "$CONF" -c
    wait_until 30 slurmctld scontrol ping
    slurmd -f "$CONF" -N "$NODE"
    wait_until 60 "node $NODE to be idle" node_idle
    trap - EXIT
    log "up: node $NODE idle; export SLURM_CONF=$CONF"
}

cancel_jobs() {  # cancel every job of this cluster and wait until none is running
    alive slurmctld || return 0
    scancel --full --quiet --partition=debug --user=root 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while [[ -n $(squeue -h -t R,CG -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.5; done
}

stop_daemon() {  # stop_daemon NAME: TERM, then KILL after 10 s, only the PID its PID file names
    alive "$1" || { rm -f "$STATE/run/$1.pid"; return 0; }
    local pid
    pid=$(<"$STATE/run/$1.pid")
    kill -TERM "$pid"
    for _ in $(seq 20); do alive "$1" || break; sleep 0.5; done
    if alive "$1"; then log "$1 ($pid) ignored TERM; killing"; kill -KILL "$pid"; fi
    rm -f "$STATE/run/$1.pid"
}

cmd_stop_daemons() {
    stop_daemon slurmd
    stop_daemon slurmctld
    stop_daemon munged
    unlink_system_conf
}

cmd_stop() {
    cancel_jobs
    cmd_stop_daemons
    log "stopped (state and logs kept in $STATE)"
}

cmd_status() {
    local name rc=0
    for name in munged slurmctld slurmd; do
        if alive "$name"; then echo "$name running (pid $(<"$STATE/run/$name.pid"))"; else echo "$name stopped"; rc=3; fi
    done
    ((rc == 0)) && sinfo -N -o "%N %T %c %m %G"
    return "$rc"
}

case ${1:-} in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) die "usage: $0 install|start|stop|status|env" ;;
esac
