#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, from Debian's slurm-wlm and munge (apt-get install slurm-wlm munge): to try
# a cluster sweep file on a laptop or a CI runner before queueing it for real, and to test the sweep's SLURM path.
#
#   scripts/slurm_local.sh start    # write its slurm.conf (this host's cores and memory, no GPUs), start munged,
#                                   # slurmctld and slurmd, wait until sinfo shows the node idle
#   scripts/slurm_local.sh status   # what runs, and sinfo
#   scripts/slurm_local.sh stop     # end the daemons it started (by the pid files it wrote), nothing else
#   scripts/slurm_local.sh env      # the line to paste into a shell: export SLURM_CONF=…
#
# Everything lives in one folder of its own: $SLURM_LOCAL_DIR, default .slurm/ in the repository (git ignores it):
# slurm.conf, the munge key and socket, pid files, logs, the controller's state. SLURM's commands (sbatch, squeue…)
# find this cluster through SLURM_CONF; `start` prints the export line, and the tests read .slurm/slurm.conf.
# The daemons run as the user who starts them (SlurmUser is that user): root on a CI runner; on a laptop run
# `sudo scripts/slurm_local.sh start` (slurmd starts jobs as their owner, which needs root). Ports: $SLURM_LOCAL_PORT
# (default 6817) for slurmctld and the next one for slurmd. No accounting storage (a fresh install's default).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${SLURM_LOCAL_DIR:-$ROOT/.slurm}"
PORT="${SLURM_LOCAL_PORT:-6817}"
CONF="$DIR/slurm.conf"
MARK="# written by scripts/slurm_local.sh: a one-node cluster of its own"
TIMEOUT="${SLURM_LOCAL_TIMEOUT:-60}"
export SLURM_CONF="$CONF"

say() { echo "[slurm_local] $*"; }
die() { echo "[slurm_local] ERROR: $*" >&2; exit 1; }

alive() {  # alive NAME: the pid in its pid file runs that program
  local f="$DIR/run/$1.pid" pid
  [ -f "$f" ] || return 1
  pid="$(tr -dc 0-9 <"$f" 2>/dev/null)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q "$1" "/proc/$pid/comm" 2>/dev/null
}

tails() {
  for d in munged slurmctld slurmd; do
    [ -f "$DIR/log/$d.log" ] && { echo "--- last lines of $DIR/log/$d.log"; tail -n 15 "$DIR/log/$d.log"; }
  done
  return 0
}

write_conf() {
  local host cpus mem
  host="$(hostname -s)"
  for c in slurmctld slurmd munged sinfo; do
    command -v "$c" >/dev/null 2>&1 || [ -x "/usr/sbin/$c" ] || \
      die "$c not found: install Debian's packages (apt-get install slurm-wlm munge)"
  done
  cpus="$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -1)"
  mem="$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -1)"
  [ -n "$cpus" ] && [ -n "$mem" ] || die "slurmd -C did not say this host's CPUs and memory"
  mkdir -p "$DIR"/{run,log,state,spool,munge,key}
  chmod 755 "$DIR/munge"  # munged: the socket's folder open to all
  chmod 700 "$DIR/key"
  cat >"$CONF" <<EOF
$MARK
ClusterName=nbutils-local
SlurmctldHost=$host
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((mem / cpus))
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
InactiveLimit=0
KillWait=10
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

in_use() {  # in_use PORT: something on this host listens on it
  if command -v ss >/dev/null 2>&1; then
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
  fi
}

check_setup() {  # before anything is written or started: what slurm.conf cannot hold, ports another program holds
  case "$DIR" in
    *[[:space:]]*|*'#'*|*'='*|*'"'*|*"'"*)
      die "SLURM_LOCAL_DIR: '$DIR' has a space, '#', '=' or a quote, which slurm.conf cannot hold in a path; set SLURM_LOCAL_DIR to a folder without them (e.g. SLURM_LOCAL_DIR=/tmp/nbutils-slurm $0 start)" ;;
  esac
  case "$PORT" in
    ''|*[!0-9]*) die "SLURM_LOCAL_PORT: '$PORT' is not a port number (1024-65534)" ;;
  esac
  [ "$PORT" -ge 1024 ] && [ "$PORT" -le 65534 ] || die "SLURM_LOCAL_PORT: $PORT is not in 1024-65534"
  for p in "$PORT" "$((PORT + 1))"; do
    in_use "$p" && die "port $p is in use by another program (slurmctld takes SLURM_LOCAL_PORT=$PORT, slurmd the next one); choose free ones: SLURM_LOCAL_PORT=<port> $0 start"
  done
  return 0
}

start() {
  if [ -f "$CONF" ] && ! head -1 "$CONF" | grep -qxF "$MARK"; then
    die "$CONF exists and was not written by this script: it is left as it is (choose another SLURM_LOCAL_DIR)"
  fi
  if alive slurmctld && alive slurmd; then
    say "already running ($DIR)"
  else
    alive slurmctld || alive slurmd || check_setup
    for d in munged slurmctld slurmd; do
      if ! alive "$d" && [ -f "$DIR/run/$d.pid" ]; then rm -f "$DIR/run/$d.pid"; fi
    done
    write_conf
    if ! alive munged; then
      [ -f "$DIR/key/munge.key" ] || { dd if=/dev/urandom of="$DIR/key/munge.key" bs=1024 count=1 status=none; }
      chmod 400 "$DIR/key/munge.key"
      munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/key/munge.key" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/key/munged.seed" \
        || { tails; die "munged did not start"; }
    fi
    alive slurmctld || slurmctld -c || { tails; die "slurmctld did not start"; }
    alive slurmd || slurmd || { tails; die "slurmd did not start"; }
  fi
  local t=0
  until sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; do
    t=$((t + 1))
    if [ "$t" -ge "$TIMEOUT" ]; then
      sinfo 2>&1 || true
      tails
      die "the node is not idle after ${TIMEOUT} s (the daemons' logs above; stop with: $0 stop)"
    fi
    sleep 1
  done
  say "one-node cluster up in $DIR (node $(hostname -s), partition debug); for SLURM's commands in your shell:"
  echo "export SLURM_CONF=$CONF"
}

stop() {
  local any=0
  for d in slurmd slurmctld munged; do
    if alive "$d"; then
      kill "$(tr -dc 0-9 <"$DIR/run/$d.pid")" && say "stopped $d" && any=1
      for _ in $(seq 1 50); do alive "$d" || break; sleep 0.2; done
      alive "$d" && say "WARNING: $d (pid $(cat "$DIR/run/$d.pid")) still runs"
    fi
    alive "$d" || rm -f "$DIR/run/$d.pid"
  done
  [ "$any" = 1 ] || say "nothing of $DIR was running"
}

status() {
  local rc=0
  for d in munged slurmctld slurmd; do
    if alive "$d"; then say "$d runs (pid $(tr -dc 0-9 <"$DIR/run/$d.pid"))"; else say "$d is not running"; rc=3; fi
  done
  [ "$rc" = 0 ] && sinfo
  return "$rc"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
