#!/usr/bin/env bash
# tools/slurm/up.sh - bring up a real single-host Slurm 22.05 cluster on Debian 12 (bookworm), as root,
# without systemd: installs slurmctld/slurmd/munge (and MariaDB + slurmdbd for sacct) via apt when missing,
# writes /etc/slurm/{slurm,gres}.conf and starts the daemons. Stop it with tools/slurm/down.sh.
#
# With 2 or more nodes each slurmd is a real node of its own: it runs in its own network namespace (address
# $SLURM_NET.11, .12, ... on a bridge a2rl-br0 that holds $SLURM_NET.1, where slurmctld and slurmdbd answer;
# nothing leaves this machine) and UTS namespace (hostname <host>n1, <host>n2, ...), and its jobs get a
# node-local TMPDIR ($SLURM_LOCAL_DIR/nodes/<node>/tmp, set by a TaskProlog). Everything else (the sweep
# directory, /tmp) is shared, as a cluster's shared file system is. With 1 node slurmd shares this machine's
# network (127.0.0.1) and hostname.
#
# Idempotent: if the cluster is up, healthy and its config unchanged, it exits 0 at once (no root needed);
# otherwise it installs what is missing, stops leftovers (down.sh) and starts the daemons again.
#
#   tools/slurm/up.sh [--nodes N]           bring the cluster up (or keep it up)
#   tools/slurm/up.sh [--nodes N] --status  start nothing; exit 0 = up, healthy, same config; 1 = not running;
#                                           2 = running but unhealthy or with another config
#
# Knobs (environment variables):
#   SLURM_LOCAL_DIR       state/log/run directory                           (default /tmp/slurm-local)
#   SLURM_NODES           nodes, one slurmd each (--nodes N sets it; >1: each in its own network
#                         namespace; tools/slurm/node.sh stops/starts one)   (default 1)
#   SLURM_NET             first three octets of the nodes' private subnet    (default 10.201.7)
#   SLURM_CPUS            CPUs declared per node (may exceed nproc)          (default 8)
#   SLURM_MEM_MB          RealMemory per node, MB                            (default 20000)
#   SLURM_GPUS            fake GPUs (gres/gpu) per node, 0 = none            (default 2)
#   SLURM_ACCT            slurmdbd (MariaDB + slurmdbd: sacct works) | none  (default slurmdbd)
#   SLURM_AUTH            munge | none (auth/none, no munged; tested with SLURM_ACCT=none only) (default munge)
#   SLURM_MAX_ARRAY_SIZE  MaxArraySize= in slurm.conf (array indices < it)   (default 1001)
#   SLURM_WIPE_STATE      1 = forget slurmctld state (job ids restart at 1)  (default 0)
set -euo pipefail

BASE=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
NODES=${SLURM_NODES:-1}
CPUS=${SLURM_CPUS:-8}
MEM=${SLURM_MEM_MB:-20000}
GPUS=${SLURM_GPUS:-2}
ACCT=${SLURM_ACCT:-slurmdbd}
AUTH=${SLURM_AUTH:-munge}
MAX_ARRAY=${SLURM_MAX_ARRAY_SIZE:-1001}
ETC=/etc/slurm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
H=$(hostname -s)
t0=$(date +%s%N)
log() { echo "[up.sh +$(( ($(date +%s%N) - t0) / 1000000 ))ms] $*"; }
die() { echo "up.sh: $*" >&2; exit 1; }

MODE=up
while [ $# -gt 0 ]; do
  case "$1" in
    --status) MODE=status ;;
    --nodes) [ $# -ge 2 ] || die "--nodes needs a number"; NODES=$2; shift ;;
    --nodes=*) NODES=${1#--nodes=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
  shift
done
NET=${SLURM_NET:-10.201.7}
[[ $NET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "SLURM_NET must be three octets like 10.201.7, not '$NET'"
BRIDGE=a2rl-br0
case "$ACCT" in none|slurmdbd) ;; *) die "SLURM_ACCT must be none or slurmdbd, not '$ACCT'" ;; esac
case "$AUTH" in none|munge) ;; *) die "SLURM_AUTH must be munge or none, not '$AUTH'" ;; esac
for v in NODES CPUS MEM GPUS MAX_ARRAY; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, not '${!v}'"
done
[ "$NODES" -ge 1 ] && [ "$CPUS" -ge 1 ] && [ "$MAX_ARRAY" -ge 1 ] || die "SLURM_NODES, SLURM_CPUS and SLURM_MAX_ARRAY_SIZE must be >= 1"

[ "$NODES" -le 200 ] || die "SLURM_NODES must be at most 200"
if [ "$NODES" = 1 ]; then NODELIST=("$H"); else NODELIST=(); for i in $(seq 1 "$NODES"); do NODELIST+=("${H}n$i"); done; fi
# where slurmctld (and slurmdbd) answer: loopback for one node, the bridge's address for nodes in namespaces
if [ "$NODES" = 1 ]; then CTLD_ADDR=127.0.0.1; else CTLD_ADDR=$NET.1; fi
netns_of() { echo "a2rl-$1"; }

# ------------------------------------------------------------------ generate the config into a temp dir
GEN=$(mktemp -d)
trap 'rm -rf "$GEN"' EXIT
if [ "$ACCT" = slurmdbd ]; then
  if [ "$NODES" = 1 ]; then DBD_HOST=localhost; else DBD_HOST=$CTLD_ADDR; fi
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$DBD_HOST
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/linux"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
GRES_TYPES=""; GRES_NODE=""
if [ "$GPUS" -gt 0 ]; then GRES_TYPES="GresTypes=gpu"; GRES_NODE="Gres=gpu:$GPUS"; fi
{
cat <<EOF
# generated by a2rl tools/slurm/up.sh (SLURM_LOCAL_DIR=$BASE)
ClusterName=ci
SlurmctldHost=${H}($CTLD_ADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/$AUTH
CredType=cred/$AUTH
# a requeued job may start again only cred_expire+1 s later (default 120; minimum 5)
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmdSpoolDir=$BASE/spool/slurmd-%n
StateSaveLocation=$BASE/spool/ctld
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldPort=6817
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MaxArraySize=$MAX_ARRAY
$ACCT_CONF
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.txt
KillWait=10
MinJobAge=300
InactiveLimit=0
$GRES_TYPES
EOF
if [ "$NODES" = 1 ]; then
  echo "NodeName=$H NodeAddr=127.0.0.1 NodeHostname=$H Port=6818 CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM $GRES_NODE State=UNKNOWN"
else
  # each job's TMPDIR is its node's own directory, as on a cluster whose nodes have local disks
  echo "TaskProlog=$BASE/etc/task-prolog.sh"
  i=0
  for n in "${NODELIST[@]}"; do
    i=$((i + 1))
    echo "NodeName=$n NodeAddr=$NET.$((10 + i)) NodeHostname=$n Port=6818 CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM $GRES_NODE State=UNKNOWN"
  done
fi
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$GEN/slurm.conf"
{
  echo "AutoDetect=off"
  # File= must name character devices; up.sh makes /dev/null-like ones (c 1 3) under $BASE/dev
  if [ "$GPUS" -gt 0 ]; then
    for n in "${NODELIST[@]}"; do echo "NodeName=$n Name=gpu File=$BASE/dev/gpu[0-$((GPUS - 1))]"; done
  fi
} >"$GEN/gres.conf"

# ------------------------------------------------------------------ already up with this config?
alive_pidfile() { [ -s "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }
healthy() {
  cmp -s "$GEN/slurm.conf" "$ETC/slurm.conf" && cmp -s "$GEN/gres.conf" "$ETC/gres.conf" || return 1
  alive_pidfile "$BASE/run/slurmctld.pid" || return 1
  if [ "$NODES" != 1 ]; then
    for n in "${NODELIST[@]}"; do [ -e "/run/netns/$(netns_of "$n")" ] || return 1; done
  fi
  for n in "${NODELIST[@]}"; do alive_pidfile "$BASE/run/slurmd-$n.pid" || return 1; done
  if [ "$ACCT" = slurmdbd ]; then alive_pidfile "$BASE/run/slurmdbd.pid" || return 1; fi
  local states
  states=$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [ "$(echo "$states" | wc -l)" = "$NODES" ] && ! echo "$states" | awk '{print $2}' | grep -qvE '^(idle|mix|alloc|comp)$'
}
if healthy; then
  [ "$MODE" = status ] || log "already up: $(sinfo -h -N -o '%N:%t' | tr '\n' ' ')"
  exit 0
fi
if [ "$MODE" = status ]; then
  for f in "$BASE"/run/slurmctld.pid "$BASE"/run/slurmd-*.pid "$BASE"/run/slurmdbd.pid; do
    alive_pidfile "$f" && exit 2
  done
  exit 1
fi

[ "$(id -u)" = 0 ] || die "the cluster is not up (or its config differs) and starting it needs root"
mkdir -p "$BASE"/{etc,run,log,spool/ctld,dev}
cp "$GEN/slurm.conf" "$GEN/gres.conf" "$BASE/etc/"

# ------------------------------------------------------------------ install (only what is missing)
pkgs=(slurmctld slurmd slurm-client munge)
if [ "$ACCT" = slurmdbd ]; then pkgs+=(slurmdbd mariadb-server mariadb-client); fi
if [ "$NODES" != 1 ]; then pkgs+=(iproute2); fi  # ip: the nodes' network namespaces
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get (this script targets Debian 12)"
  log "installing with apt-get: ${missing[*]} (log: $BASE/log/apt.log)"
  export DEBIAN_FRONTEND=noninteractive
  # keep the packages' init scripts from starting daemons during install (no systemd here anyway)
  made_policy=0
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1; }
  rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$BASE/log/apt.log" 2>&1 </dev/null || rc=$?
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  [ $rc = 0 ] || { tail -n 40 "$BASE/log/apt.log" >&2; die "apt-get failed (rc=$rc)"; }
  log "installed"
fi

# ------------------------------------------------------------------ stop leftovers, lay out dirs
"$HERE/down.sh" >/dev/null 2>&1 || true
if [ "${SLURM_WIPE_STATE:-0}" = 1 ]; then rm -rf "$BASE"/spool/ctld/*; fi
rm -rf "$BASE"/spool/slurmd-*
for n in "${NODELIST[@]}"; do mkdir -p "$BASE/spool/slurmd-$n"; done
if [ "$NODES" != 1 ]; then
  for n in "${NODELIST[@]}"; do install -d -m 1777 "$BASE/nodes/$n/tmp"; done
  cat >"$BASE/etc/task-prolog.sh" <<EOF
#!/bin/sh
# TaskProlog (tools/slurm/up.sh): a job's TMPDIR is its node's own directory
echo "export TMPDIR=$BASE/nodes/\$SLURMD_NODENAME/tmp"
EOF
  chmod 755 "$BASE/etc/task-prolog.sh"
fi
rm -f "$BASE"/log/*.log
if [ "$GPUS" -gt 0 ]; then
  for i in $(seq 0 $((GPUS - 1))); do
    [ -c "$BASE/dev/gpu$i" ] || { rm -f "$BASE/dev/gpu$i"; mknod -m 666 "$BASE/dev/gpu$i" c 1 3; }
  done
fi
mkdir -p "$ETC"
cp "$GEN/slurm.conf" "$GEN/gres.conf" "$ETC/"
log "wrote $ETC/slurm.conf and $ETC/gres.conf (CPUs=$CPUS GPUs=$GPUS nodes=$NODES MaxArraySize=$MAX_ARRAY acct=$ACCT)"

# ------------------------------------------------------------------ the nodes' network namespaces
# a bridge holding $NET.1 on this machine; per node a namespace with a veth on it ($NET.11, ...) and its own
# loopback. down.sh removes what $BASE/run/netns lists.
if [ "$NODES" != 1 ]; then
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE (needs CAP_NET_ADMIN)"
  echo "bridge $BRIDGE" >"$BASE/run/netns"
  ip addr replace "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  i=0
  for n in "${NODELIST[@]}"; do
    i=$((i + 1)); ns=$(netns_of "$n")
    ip netns del "$ns" 2>/dev/null || true
    ip link del "a2rl-v$i" 2>/dev/null || true
    ip netns add "$ns" || die "cannot create network namespace $ns"
    echo "netns $ns" >>"$BASE/run/netns"
    ip link add "a2rl-v$i" type veth peer name eth0 netns "$ns"
    ip link set "a2rl-v$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  log "network namespaces up: ${NODELIST[*]} on $NET.0/24 (bridge $BRIDGE holds $NET.1)"
fi

# ------------------------------------------------------------------ munge
if [ "$AUTH" = munge ]; then
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  alive_pidfile /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 1 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n </dev/null | unmunge >/dev/null || die "munged is not working"
  log "munged up (pid $(cat /run/munge/munged.pid))"
fi

# ------------------------------------------------------------------ accounting: MariaDB + slurmdbd
if [ "$ACCT" = slurmdbd ]; then
  install -d -o mysql -g mysql /run/mysqld
  if ! mysqladmin ping >/dev/null 2>&1; then
    ( setsid mysqld_safe --skip-syslog >"$BASE/log/mysqld_safe.out" 2>&1 </dev/null & echo $! >"$BASE/run/mysqld_safe.pid" )
    for _ in $(seq 1 150); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.2; done
    mysqladmin ping >/dev/null 2>&1 || { tail -n 20 "$BASE/log/mysqld_safe.out" >&2; die "MariaDB did not start in 30 s"; }
  fi
  mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
            CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/$AUTH
DbdHost=localhost
SlurmUser=root
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$ETC/slurmdbd.conf"
  /usr/sbin/slurmdbd
  for _ in $(seq 1 150); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx ci || sacctmgr -i add cluster ci >/dev/null \
    || { tail -n 20 "$BASE/log/slurmdbd.log" >&2; die "slurmdbd is not answering"; }
  log "slurmdbd up (pid $(cat "$BASE/run/slurmdbd.pid"))"
fi

# ------------------------------------------------------------------ slurmctld + slurmd(s)
/usr/sbin/slurmctld
for n in "${NODELIST[@]}"; do
  if [ "$NODES" = 1 ]; then /usr/sbin/slurmd
  else SLURM_LOCAL_DIR=$BASE "$HERE/node.sh" start "$n" || exit 1  # in its own network and hostname
  fi
done
for _ in $(seq 1 300); do
  if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | wc -l)" = "$NODES" ]; then
    log "cluster up: $(sinfo -h -N -o '%N:%t' | tr '\n' ' ')(slurmctld pid $(cat "$BASE/run/slurmctld.pid"))"
    exit 0
  fi
  sleep 0.1
done
echo "up.sh: nodes did not become idle within 30 s" >&2
sinfo -N -l >&2 || true
tail -n 30 "$BASE"/log/*.log >&2 || true
exit 1
