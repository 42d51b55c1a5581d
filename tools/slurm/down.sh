#!/usr/bin/env bash
# tools/slurm/down.sh - stop what tools/slurm/up.sh started: cancel all jobs, then stop each daemon by the
# PID in its pid file (slurmd, slurmctld, slurmdbd, MariaDB if up.sh started it, munged), and remove the nodes'
# network namespaces and bridge (a cluster of 2+ nodes). Safe and quick when nothing runs; always exits 0. State (job-id counter, accounting DB) stays under SLURM_LOCAL_DIR.
set -uo pipefail
BASE=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
t0=$(date +%s%N)

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
stop_pidfiles() {  # stop_pidfiles FILE... : SIGTERM all at once, wait up to 15 s, then SIGKILL
  local f pid pids=() names=()
  for f in "$@"; do
    [ -s "$f" ] || { rm -f "$f"; continue; }
    pid=$(cat "$f"); rm -f "$f"
    alive "$pid" || continue
    kill -TERM "$pid" 2>/dev/null && { pids+=("$pid"); names+=("$(basename "$f" .pid)($pid)"); }
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for _ in $(seq 1 150); do
    local left=0
    for pid in "${pids[@]}"; do alive "$pid" && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do alive "$pid" && { echo "down.sh: pid $pid ignored SIGTERM, sending SIGKILL"; kill -KILL "$pid"; }; done
  echo "down.sh: stopped ${names[*]}"
}

# 1. cancel all jobs while the controller is up, so every slurmstepd ends by itself
if [ -s "$BASE/run/slurmctld.pid" ] && alive "$(cat "$BASE/run/slurmctld.pid")"; then
  for u in $(timeout 10 squeue -h -o %u 2>/dev/null | sort -u); do timeout 10 scancel -u "$u" 2>/dev/null; done
  for _ in $(seq 1 150); do [ -z "$(timeout 5 squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
fi

# 2. slurm daemons (slurmdbd last: slurmctld flushes pending job records to it when it stops; records it
#    could not send wait in spool/ctld/dbd.messages for the next start), then MariaDB (only if up.sh
#    started it) and munged
stop_pidfiles "$BASE"/run/slurmd-*.pid "$BASE/run/slurmctld.pid"
stop_pidfiles "$BASE/run/slurmdbd.pid"
if [ -s "$BASE/run/mysqld_safe.pid" ] && alive "$(cat "$BASE/run/mysqld_safe.pid")"; then
  timeout 30 mysqladmin shutdown 2>/dev/null
fi
stop_pidfiles "$BASE/run/mysqld_safe.pid" /run/munge/munged.pid

# 3. any slurmstepd left behind by our slurmd (slurmd chdir()s to its log dir, inherited by slurmstepd)
for p in /proc/[0-9]*; do
  case "$(readlink "$p/exe" 2>/dev/null)" in /usr/sbin/slurmstepd*) ;; *) continue ;; esac
  case "$(readlink "$p/cwd" 2>/dev/null)" in
    "$BASE"/*) echo "down.sh: killing leftover slurmstepd ${p#/proc/}"; kill -KILL "${p#/proc/}" 2>/dev/null ;;
  esac
done

# 4. the nodes' network namespaces and their bridge (veths go with their namespace), as up.sh listed them
if [ -s "$BASE/run/netns" ]; then
  while read -r kind name; do
    case "$kind" in
      netns) ip netns del "$name" 2>/dev/null ;;
      bridge) ip link del "$name" 2>/dev/null ;;
    esac
  done <"$BASE/run/netns"
  rm -f "$BASE/run/netns"
  echo "down.sh: removed the nodes' network namespaces"
fi
echo "down.sh: done in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
exit 0
