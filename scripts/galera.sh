#!/usr/bin/env bash
# galera.sh runs a 3-node MariaDB Galera cluster on this machine, for the
# tests of a multi-primary cluster (galera_test.go; docs/galera.md).
#
#   scripts/galera.sh start    start the cluster (no-op if it runs)
#   scripts/galera.sh stop     stop it (its data stays until the next start)
#   scripts/galera.sh status   show each node, and the DSNs for the tests
#   scripts/galera.sh dsns     print BUNQUEUE_GALERA_DSNS's value
#   scripts/galera.sh test [go test flags]
#                              start it if needed, run the Galera tests
#                              with BUNQUEUE_GALERA_DSNS set, and stop it
#                              again if this command started it
#
# Run as root: it installs galera-4 and rsync with apt-get when they are
# missing, and starts each mariadbd with --user=mysql. The nodes listen on
# 127.0.0.1 only: clients on 3311-3313, Galera replication on 4571-4573,
# incremental state transfer on 4581-4583, rsync state transfer on
# 4591-4593. Each node has its own datadir, socket and error log under
# BUNQUEUE_GALERA_DIR (default /tmp/bunqueue-galera/nodeN). A start when
# no node runs creates the cluster afresh (it holds test data only): node
# 1 bootstraps it with --wsrep-new-cluster, with database test and a
# passwordless root@127.0.0.1, and nodes 2 and 3 join by state transfer.
# It never reads /etc/mysql: every mariadbd runs with --defaults-file and
# every client with --no-defaults and its node's socket, so the machine's
# own MariaDB server is left alone.
set -euo pipefail

DIR=${BUNQUEUE_GALERA_DIR:-/tmp/bunqueue-galera}
NODES=(1 2 3)
MARIADBD=${MARIADBD:-/usr/sbin/mariadbd}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

client_port() { echo $((3310 + $1)); }
gcomm_port() { echo $((4570 + $1)); }
ist_port() { echo $((4580 + $1)); }
sst_port() { echo $((4590 + $1)); }
node_dir() { echo "$DIR/node$1"; }
sock() { echo "$(node_dir "$1")/mysqld.sock"; }

log() { echo "galera.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# sql runs a statement on node $1 as root over its socket, printing the
# values without headers.
sql() { mariadb --no-defaults -S "$(sock "$1")" -uroot -N -B -e "$2"; }

# status_var prints node $1's global status variable $2, or nothing.
status_var() { sql "$1" "SHOW GLOBAL STATUS LIKE '$2'" 2>/dev/null | cut -f2; }

# running reports whether node $1's mariadbd is alive, by the pid launch
# kept (mariadbd writes its own pid file only after a state transfer).
running() {
	local pid
	pid=$(cat "$(node_dir "$1")/launch.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

provider() {
	local so
	for so in /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so \
		/usr/lib/x86_64-linux-gnu/galera/libgalera_smm.so; do
		[ -f "$so" ] && { echo "$so"; return; }
	done
	dpkg -L galera-4 2>/dev/null | grep 'libgalera_smm\.so$' | head -n1
}

# install_missing installs galera-4 and rsync from Debian when missing.
install_missing() {
	local want=()
	[ -n "$(provider)" ] || want+=(galera-4)
	command -v rsync >/dev/null || want+=(rsync)
	[ ${#want[@]} -eq 0 ] && return
	[ "$(id -u)" -eq 0 ] || die "install ${want[*]} (apt-get install ${want[*]}), or run as root"
	log "installing ${want[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null
}

# write_config writes node $1's option file.
write_config() {
	local n=$1 d addrs
	d=$(node_dir "$n")
	addrs=$(for i in "${NODES[@]}"; do printf '127.0.0.1:%s,' "$(gcomm_port "$i")"; done)
	cat >"$d/my.cnf" <<EOF
[mysqld]
user = mysql
datadir = $d/data
socket = $d/mysqld.sock
pid-file = $d/mysqld.pid
log-error = $d/error.log
port = $(client_port "$n")
bind-address = 127.0.0.1
skip-name-resolve
server_id = $n
innodb_buffer_pool_size = 256M
max_connections = 500
binlog_format = ROW
default_storage_engine = InnoDB
innodb_autoinc_lock_mode = 2

wsrep_on = ON
wsrep_provider = $(provider)
wsrep_cluster_name = bunqueue-galera
wsrep_cluster_address = gcomm://${addrs%,}
wsrep_node_name = node$n
wsrep_node_address = 127.0.0.1:$(gcomm_port "$n")
wsrep_node_incoming_address = 127.0.0.1:$(client_port "$n")
wsrep_provider_options = "gmcast.listen_addr=tcp://127.0.0.1:$(gcomm_port "$n");ist.recv_addr=127.0.0.1:$(ist_port "$n");gcache.size=128M"
wsrep_sst_method = rsync
wsrep_sst_receive_address = 127.0.0.1:$(sst_port "$n")
EOF
}

# init_node creates node $1's directory, option file and system tables.
init_node() {
	local d
	d=$(node_dir "$1")
	rm -rf "$d"
	mkdir -p "$d/data"
	write_config "$1"
	mariadb-install-db --no-defaults --user=mysql --datadir="$d/data" \
		--auth-root-authentication-method=socket >"$d/install.log" 2>&1 ||
		die "mariadb-install-db for node $1 failed: see $d/install.log"
	chown -R mysql:mysql "$d"
}

# launch starts node $1's mariadbd in the background, with extra flags.
launch() {
	local d
	d=$(node_dir "$1")
	shift
	nohup "$MARIADBD" --defaults-file="$d/my.cnf" --user=mysql "$@" >>"$d/stdout.log" 2>&1 &
	echo $! >"$d/launch.pid"
}

# wait_synced waits until node $1 is Synced and sees the cluster size $2.
wait_synced() {
	local n=$1 size=$2 i state csize
	for i in $(seq 1 180); do
		state=$(status_var "$n" wsrep_local_state_comment || true)
		csize=$(status_var "$n" wsrep_cluster_size || true)
		if [ "$state" = Synced ] && [ "${csize:-0}" -ge "$size" ]; then
			return
		fi
		running "$n" || die "node $n exited: see $(node_dir "$n")/error.log"
		sleep 1
	done
	die "node $n not Synced with $size nodes after 180 s (state '$state', size '$csize'): see $(node_dir "$n")/error.log"
}

bootstrap() {
	log "creating the cluster in $DIR"
	for n in "${NODES[@]}"; do init_node "$n"; done
	launch 1 --wsrep-new-cluster
	wait_synced 1 1
	sql 1 "CREATE DATABASE IF NOT EXISTS test;
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
}

start() {
	install_missing
	[ -x "$MARIADBD" ] || die "no mariadbd at $MARIADBD (set MARIADBD)"
	local any=0 n
	for n in "${NODES[@]}"; do running "$n" && any=1; done
	if [ $any -eq 0 ]; then
		bootstrap
	fi
	for n in "${NODES[@]}"; do
		if ! running "$n"; then
			log "starting node $n"
			launch "$n"
		fi
		wait_synced "$n" 1
	done
	wait_synced 1 ${#NODES[@]}
	log "cluster of $(status_var 1 wsrep_cluster_size) nodes is up"
	dsns
}

stop() {
	local n i pid
	for n in 3 2 1; do
		running "$n" || continue
		pid=$(cat "$(node_dir "$n")/launch.pid")
		log "stopping node $n (pid $pid)"
		mariadb-admin --no-defaults -S "$(sock "$n")" -uroot shutdown 2>/dev/null || kill -TERM "$pid"
		for i in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 1
		done
		! kill -0 "$pid" 2>/dev/null || die "node $n (pid $pid) did not stop in 60 s"
	done
}

status() {
	local n up=0
	for n in "${NODES[@]}"; do
		if running "$n"; then
			up=$((up + 1))
			echo "node$n 127.0.0.1:$(client_port "$n") up: $(status_var "$n" wsrep_local_state_comment), cluster size $(status_var "$n" wsrep_cluster_size)"
		else
			echo "node$n 127.0.0.1:$(client_port "$n") down"
		fi
	done
	[ $up -gt 0 ] && echo "BUNQUEUE_GALERA_DSNS=$(dsns)"
	[ $up -eq ${#NODES[@]} ]
}

dsns() {
	local out=() n
	for n in "${NODES[@]}"; do
		out+=("root@tcp(127.0.0.1:$(client_port "$n"))/test?parseTime=true&loc=UTC")
	done
	(IFS=,; echo "${out[*]}")
}

run_tests() {
	local started=0 n
	for n in "${NODES[@]}"; do running "$n" || started=1; done
	start >/dev/null
	local rc=0
	(cd "$ROOT" && BUNQUEUE_GALERA_DSNS=$(dsns) go test -run 'Galera' -count=1 -v "$@" ./tests/bunqueue) || rc=$?
	[ $started -eq 0 ] || stop
	return $rc
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
dsns) dsns ;;
test) shift; run_tests "$@" ;;
*) die "usage: $0 start|stop|status|dsns|test [go test flags]" ;;
esac
