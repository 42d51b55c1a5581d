#!/usr/bin/env bash
# tools/slurm/node.sh start|stop NODE - start or stop one node's slurmd of the cluster tools/slurm/up.sh made
# with 2+ nodes, in the node's own network namespace (a2rl-NODE) and hostname. Jobs running on the node go on
# while its slurmd is stopped (their slurmstepd is separate), as on a real cluster. Root only.
set -euo pipefail
BASE=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
die() { echo "node.sh: $*" >&2; exit 1; }
[ $# = 2 ] || die "usage: node.sh start|stop NODE"
action=$1 node=$2
[ -e "/run/netns/a2rl-$node" ] || die "no network namespace a2rl-$node: is $node a node of a 2+ node cluster from up.sh?"
pidfile=$BASE/run/slurmd-$node.pid
case "$action" in
  start)
    # nsenter, not `ip netns exec`, whose fresh /sys lacks the cgroup mount slurmd needs; slurmd daemonizes
    nsenter --net="/run/netns/a2rl-$node" unshare --uts sh -c 'hostname "$1" && exec /usr/sbin/slurmd -N "$1"' sh "$node" \
      || die "slurmd of node $node did not start: $(tail -n 3 "$BASE/log/slurmd-$node.log" 2>/dev/null)" ;;
  stop)
    [ -s "$pidfile" ] || die "$pidfile is missing: slurmd of $node is not running"
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || die "slurmd of $node (pid $pid) is not running"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
    die "slurmd of $node (pid $pid) did not stop in 15 s" ;;
  *) die "usage: node.sh start|stop NODE" ;;
esac
