#!/usr/bin/env bash
# local-cluster.sh — a one-node Slurm cluster on localhost, for the test of
# sharded sweeps (tests/slurm_cluster.sh) and for trying scripts/slurm/ on a
# workstation. Needs Debian's slurm-wlm and munge (scripts/setup.sh --slurm)
# and root (SlurmUser=root). Everything lives in DIR: munge key and socket,
# slurm.conf, state, spool, logs, and the pid of every daemon it started.
#
#   scripts/slurm/local-cluster.sh start DIR [--owner PID]
#       writes DIR/slurm.conf, starts munged, slurmctld and slurmd, waits for
#       the node to be idle (30 s at most), prints `export SLURM_CONF=...`.
#       --owner PID: a watcher stops the cluster when PID exits, however it ends.
#       Exit 0: up; 1: a daemon did not come up (its log is printed); 3: no Slurm.
#   scripts/slurm/local-cluster.sh stop DIR
#       cancels the cluster's jobs, stops every daemon it started by pid (TERM,
#       then KILL after 10 s), and kills what is left of its jobs: processes
#       whose environment carries SLURM_CONF=DIR/slurm.conf.
set -euo pipefail

usage() { echo "usage: $0 start DIR [--owner PID] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
what=$1
dir=$(realpath -m "$2")
shift 2
conf=$dir/slurm.conf

# The pids under DIR/pids/ that are still the processes we started.
ours() {
  local f pid
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -xF "SLURM_CONF=$conf" >/dev/null; then
      echo "$pid"
    fi
  done
}

stop() {
  if [ -e "$conf" ] && command -v scancel >/dev/null; then
    SLURM_CONF=$conf timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
  fi
  local live pid i
  live=$(ours)
  for name in slurmd slurmctld watcher munged; do
    [ -e "$dir/pids/$name.pid" ] || continue
    pid=$(cat "$dir/pids/$name.pid")
    if [ "$pid" != $$ ] && grep -qx "$pid" <<<"$live"; then
      kill -TERM "$pid" 2>/dev/null || true
      for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pids/$name.pid"
  done
  # What the jobs left: slurmstepd, and the programs it ran (they carry
  # SLURM_JOB_ID), with our SLURM_CONF in their environment.
  local env
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] && continue
    env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
    grep -qxF "SLURM_CONF=$conf" <<<"$env" || continue
    if grep -q '^SLURM_JOB_ID=' <<<"$env" || [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ]; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

if [ "$what" = stop ]; then
  stop
  echo "local-cluster: stopped the daemons of $dir"
  exit 0
fi
[ "$what" = start ] || usage
owner=
if [ "${1:-}" = --owner ]; then owner=${2:?--owner needs a pid}; shift 2; fi

for tool in munged mungekey slurmctld slurmd sbatch sinfo scancel; do
  if ! command -v "$tool" >/dev/null; then
    echo "local-cluster: $tool is not installed (scripts/setup.sh --slurm installs slurm-wlm and munge)" >&2
    exit 3
  fi
done
if [ "$(id -u)" -ne 0 ]; then
  echo "local-cluster: needs root (the conf says SlurmUser=root; slurmd runs jobs as their users)" >&2
  exit 3
fi

mkdir -p "$dir"/{pids,state,spool,logs}
chmod 755 "$dir"  # munged wants its socket's folder searchable by all
export SLURM_CONF=$conf

# Two free TCP ports for slurmctld and slurmd.
free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for _ in $(seq 50); do
  port=$((20000 + RANDOM % 20000))
  if free "$port" && free $((port + 1)); then break; fi
done

host=$(hostname -s)
cat >"$conf" <<CONF
# Written by scripts/slurm/local-cluster.sh: one node, localhost, no cgroups.
ClusterName=spikehunt-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge=3600
SchedulerType=sched/backfill
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

# Started in the background with their output in DIR/logs, stdin closed and
# no terminal: they outlive this script, and the pid of each is kept.
daemon() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/pids/$name.pid"
}
fail() {
  echo "local-cluster: $1; its log:" >&2
  tail -n 30 "$dir/logs/$2.log" >&2 || true
  stop
  exit 1
}

[ -e "$dir/munge.key" ] || mungekey --create --keyfile="$dir/munge.key" --bits=1024
chmod 600 "$dir/munge.key"
daemon munged munged --foreground --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" --log-file="$dir/logs/munged.file.log"
for _ in $(seq 100); do [ -S "$dir/munge.socket" ] && break; sleep 0.1; done
[ -S "$dir/munge.socket" ] || fail "munged did not create its socket" munged

daemon slurmctld slurmctld -D -f "$conf"
for _ in $(seq 100); do timeout 5 sinfo -h >/dev/null 2>&1 && break; sleep 0.2; done
timeout 5 sinfo -h >/dev/null 2>&1 || fail "slurmctld does not answer" slurmctld
daemon slurmd slurmd -D -f "$conf" -N "$host"
state=
for _ in $(seq 150); do
  state=$(timeout 5 sinfo -h -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || fail "the node did not come up (state: ${state:-none})" slurmd

if [ -n "$owner" ]; then
  # Stops the cluster when the owner is gone, even if it was killed.
  daemon watcher bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" stop "$3"' \
    watcher "$owner" "$(realpath "$0")" "$dir"
fi
echo "local-cluster: up in $dir ($host, $(nproc) CPUs, slurmctld port $port)"
echo "export SLURM_CONF=$conf"
