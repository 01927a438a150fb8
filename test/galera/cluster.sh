#!/usr/bin/env bash
# Three MariaDB Galera nodes on loopback, for the Galera drill and benchmark only.
#
#   test/galera/cluster.sh start     create the datadirs on first use, then start node 1
#                                    (it bootstraps the cluster), node 2 and node 3
#   test/galera/cluster.sh stop      stop the nodes through their pid files, node 3 first
#   test/galera/cluster.sh status    per node: pid, cluster size, local state
#   test/galera/cluster.sh reset     stop, then remove every datadir (the next start is fresh)
#   test/galera/cluster.sh start-node N | kill-node N   one node (the drill kills and revives node 3)
#
# Everything lives under GALERA_DIR (default /tmp/galera); client ports are 3311..3313
# (GALERA_PORT_BASE + N, base 3310). Node N replicates on 4567 + 10(N-1), takes IST on the
# next port and SST (rsync) on 4444 + 10(N-1). Connect as root without a password over TCP:
#   mariadb -h127.0.0.1 -P3311 -uroot
# About 13 s from nothing to three Synced nodes on two cores, 9 s when the datadirs exist.
# A killed node started again catches up by IST (its position recovered first), not SST.
# Needs galera-4 and rsync; both are installed with apt-get when missing. mariadbd runs as
# the mysql user: a root mariadbd would start rsync's SST daemon as root, which then drops
# to 'nobody' and cannot write the joining node's datadir.
set -u
BASE=${GALERA_DIR:-/tmp/galera}
MARIADBD=/usr/sbin/mariadbd
PROVIDER=/usr/lib/galera/libgalera_smm.so
CLUSTER_ADDR="gcomm://127.0.0.1:4567,127.0.0.1:4577,127.0.0.1:4587"
NODES="1 2 3"

port()   { echo $((${GALERA_PORT_BASE:-3310} + $1)); }
gport()  { echo $((4567 + 10 * ($1 - 1))); }
istport(){ echo $((4568 + 10 * ($1 - 1))); }
sstport(){ echo $((4444 + 10 * ($1 - 1))); }
dir()    { echo "$BASE/node$1"; }

write_cnf() {
  local n=$1 d; d=$(dir "$n")
  cat >"$d/my.cnf" <<EOF
[mariadbd]
user=mysql
datadir=$d/data
socket=$d/mysqld.sock
pid-file=$d/mariadbd.pid
log-error=$d/mariadbd.err
port=$(port "$n")
bind-address=127.0.0.1
skip-name-resolve
performance_schema=OFF
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
max_connections=300
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_flush_log_at_trx_commit=2
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=showrunner_galera
wsrep_cluster_address=$CLUSTER_ADDR
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$(gport "$n")
wsrep_node_incoming_address=127.0.0.1:$(port "$n")
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$(gport "$n");ist.recv_addr=127.0.0.1:$(istport "$n");gcache.size=32M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$(sstport "$n")
wsrep_slave_threads=2
EOF
}

init_node() {
  local n=$1 d; d=$(dir "$n")
  mkdir -p "$d"
  write_cnf "$n"
  # mariadbd runs as mysql (not root): the rsync SST daemon it spawns then keeps that
  # user; as root, rsync --daemon drops to 'nobody' and cannot write the datadir.
  chown mysql:mysql "$d"
  if [ ! -d "$d/data/mysql" ]; then
    # Node 1 gets a full system database; nodes 2 and 3 get one too (so mariadbd can
    # start), but SST (rsync from a donor) replaces it when they join.
    mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$d/install.log" 2>&1 ||
      { echo "install-db failed for node $n, see $d/install.log" >&2; return 1; }
  fi
}

# A node's servers are found by their command line, never by the pid file alone: a
# pid file outlives a killed server (and a new process may take its pid), and in a
# container whose pid 1 does not reap orphans a dead server lingers as a zombie that
# `kill -0` still reports alive. A zombie's command line is empty, so pgrep skips it.
servers_of() { pgrep -f "^$MARIADBD --defaults-file=$(dir "$1")/my.cnf( |\$)" 2>/dev/null; }
pid_of()  { servers_of "$1" | head -n 1; }
alive()   { [ -n "$(servers_of "$1")" ]; }
# A process that still runs (not gone, not a zombie).
running() { local s; s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ]; }

# Ends every server of node $1 with signal $2 and waits (up to $3 half-seconds) until none runs.
end_servers() {
  local n=$1 sig=$2 tries=$3 p
  for p in $(servers_of "$n"); do kill "-$sig" "$p" 2>/dev/null; done
  for _ in $(seq 1 "$tries"); do alive "$n" || return 0; sleep 0.5; done
  ! alive "$n"
}

# True when something listens on TCP port $1 (a server of this node that pgrep missed, or a stranger).
port_taken() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# One query on node $1. Bounded: a node that accepts connections but cannot answer
# (joining, or a donor under a read lock) must not stall the caller's loop.
q() { timeout 10 mariadb --no-defaults --connect-timeout=3 -h127.0.0.1 -P"$(port "$1")" -uroot -N -B -e "$2" 2>/dev/null; }

state_of() { q "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='WSREP_LOCAL_STATE_COMMENT'"; }

# What a node that would not sync was waiting on, for the reader of a failed run:
# its own log, and each other running node's state, log and busiest statements
# (a donor's state transfer can wait on a read lock behind a long statement).
explain_unsynced() {
  local n=$1 m
  echo "tail of $(dir "$n")/mariadbd.err:" >&2
  tail -n 40 "$(dir "$n")/mariadbd.err" >&2
  for m in $NODES; do
    [ "$m" = "$n" ] && continue
    alive "$m" || { echo "node $m: not running" >&2; continue; }
    echo "node $m: state $(state_of "$m"); tail of its mariadbd.err:" >&2
    tail -n 15 "$(dir "$m")/mariadbd.err" >&2
    echo "node $m: statements running longest:" >&2
    q "$m" "SELECT ID, USER, COMMAND, TIME, STATE, LEFT(INFO, 120) FROM information_schema.PROCESSLIST
            WHERE COMMAND <> 'Sleep' ORDER BY TIME DESC LIMIT 10" >&2
  done
}

# Waits until node $1 (server pid $2) is Synced, for SYNC_WAIT_SECONDS (default 180) by the clock.
wait_synced() {
  local n=$1 pid=$2 limit=${SYNC_WAIT_SECONDS:-180} since=$SECONDS
  while [ $((SECONDS - since)) -lt "$limit" ]; do
    [ "$(state_of "$n")" = "Synced" ] && return 0
    if ! running "$pid"; then echo "node $n died; tail of $(dir "$n")/mariadbd.err:" >&2; tail -20 "$(dir "$n")/mariadbd.err" >&2; return 1; fi
    sleep 0.5
  done
  echo "node $n not Synced after $limit s (state: $(state_of "$n"))" >&2
  explain_unsynced "$n"
  return 1
}

# A node that crashed (SIGKILL) leaves seqno -1 in grastate.dat; started as it is, it
# would ask for a full state transfer (SST: an rsync of a donor's datadir, the donor
# under FLUSH TABLES WITH READ LOCK meanwhile). Recover its last committed position
# from InnoDB first, as the distribution's galera_recovery does for systemd, so it
# asks only for the writes it missed (IST, from a donor's gcache). Prints the option
# to start with, or nothing (no crash, or no position: the node then takes an SST).
start_position_option() {
  local n=$1 d pos; d=$(dir "$n")
  grep -q '^seqno: *-1' "$d/data/grastate.dat" 2>/dev/null || return 0
  : >"$d/recover.err"; chown mysql:mysql "$d/recover.err"
  # innodb-force-recovery=2 keeps purge from starting. Without it, a datadir killed
  # with purge work pending on the tables' indexed virtual columns never exits: purge
  # needs the SQL layer to open those tables, a recovery-only server cannot, and the
  # server's exit waits on a purge task that retries forever (seen on 10.11). The
  # position is read all the same; the real start that follows purges as usual.
  # No network and a socket of its own, so no client reaches this short-lived server.
  # It takes under a second; 60 s plus SYNC_WAIT_SECONDS stays inside cluster.ts's
  # 300 s, so a stalled join prints its reasons before the caller gives up.
  if ! timeout -k 10 60 "$MARIADBD" --defaults-file="$d/my.cnf" --wsrep-recover --innodb-force-recovery=2 \
      --log-error="$d/recover.err" --skip-networking --socket="$d/recover.sock" >/dev/null 2>&1 </dev/null; then
    echo "node $n: position recovery failed (see $d/recover.err); it will take a full state transfer" >&2
    return 0
  fi
  pos=$(grep -a 'WSREP: Recovered position:' "$d/recover.err" | tail -n 1 | sed 's/.*Recovered position: *//')
  [ -n "$pos" ] && echo "--wsrep-start-position=$pos"
}

start_node() {
  local n=$1 extra=${2:-} d; d=$(dir "$n")
  if alive "$n"; then
    echo "node $n already running (pid $(pid_of "$n"))"
    wait_synced "$n" "$(pid_of "$n")"
    return
  fi
  # A port still held means a server this script cannot see: starting another would
  # fail on it ("Address already in use") after a long wait, so say so at once.
  local p
  for p in "$(port "$n")" "$(gport "$n")" "$(istport "$n")" "$(sstport "$n")"; do
    if port_taken "$p"; then
      echo "node $n cannot start: port $p is in use ($(ss -Hltnp "sport = :$p" 2>/dev/null | head -n 1))" >&2
      return 1
    fi
  done
  # A node that was the last to leave may refuse to bootstrap unless marked safe.
  if [ -n "$extra" ] && [ -f "$d/data/grastate.dat" ]; then
    sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$d/data/grastate.dat"
  fi
  local position; position=$(start_position_option "$n")
  [ -n "$position" ] && echo "node $n: recovered $position" >&2
  setsid "$MARIADBD" --defaults-file="$d/my.cnf" $extra $position >>"$d/stdout.log" 2>&1 </dev/null &
  wait_synced "$n" $!
}

need_packages() {
  local missing=""
  [ -e "$PROVIDER" ] || missing="$missing galera-4"
  command -v rsync >/dev/null 2>&1 || missing="$missing rsync"
  [ -z "$missing" ] && return 0
  echo "installing$missing" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1; } ||
    { echo "could not install$missing" >&2; return 1; }
}

case "${1:-}" in
start)
  need_packages || exit 1
  t0=$(date +%s.%N)
  for n in $NODES; do init_node "$n" || exit 1; done
  t1=$(date +%s.%N)
  start_node 1 --wsrep-new-cluster || exit 1
  t2=$(date +%s.%N)
  start_node 2 || exit 1
  t3=$(date +%s.%N)
  start_node 3 || exit 1
  t4=$(date +%s.%N)
  printf 'init %.1fs, node1 %.1fs, node2 %.1fs, node3 %.1fs, total %.1fs\n' \
    "$(echo "$t1-$t0" | bc)" "$(echo "$t2-$t1" | bc)" "$(echo "$t3-$t2" | bc)" "$(echo "$t4-$t3" | bc)" "$(echo "$t4-$t0" | bc)"
  "$0" status
  ;;
stop)
  for n in 3 2 1; do
    if alive "$n"; then
      p=$(servers_of "$n" | tr '\n' ' ')
      end_servers "$n" TERM 120 || { echo "node $n (pid $p) still running after 60 s; kill -9"; end_servers "$n" KILL 20; }
      echo "node $n stopped (pid $p)"
    fi
  done
  ;;
status)
  for n in $NODES; do
    if alive "$n"; then
      echo "node $n pid $(pid_of "$n") port $(port "$n"): $(q "$n" "SELECT GROUP_CONCAT(CONCAT(VARIABLE_NAME,'=',VARIABLE_VALUE) SEPARATOR ' ') FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('WSREP_CLUSTER_SIZE','WSREP_LOCAL_STATE_COMMENT','WSREP_READY','WSREP_CLUSTER_STATUS')")"
    else
      echo "node $n not running"
    fi
  done
  ;;
start-node)
  need_packages || exit 1
  [ -n "${2:-}" ] || { echo "usage: $0 start-node N" >&2; exit 2; }
  init_node "$2" || exit 1
  start_node "$2" || exit 1
  ;;
kill-node)
  [ -n "${2:-}" ] || { echo "usage: $0 kill-node N" >&2; exit 2; }
  if alive "$2"; then
    p=$(servers_of "$2" | tr '\n' ' ')
    end_servers "$2" KILL 20 || { echo "node $2 (pid $p) survived kill -9" >&2; exit 1; }
    echo "node $2 killed (pid $p)"
  fi
  ;;
reset)
  "$0" stop
  for n in $NODES; do rm -rf "$(dir "$n")/data" "$(dir "$n")"/*.log "$(dir "$n")"/mariadbd.err "$(dir "$n")"/recover.*; done
  ;;
*)
  echo "usage: $0 start|stop|status|reset|start-node N|kill-node N" >&2; exit 2
  ;;
esac
