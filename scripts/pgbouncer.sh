#!/usr/bin/env bash
# pgbouncer.sh: make sure PgBouncer answers on 127.0.0.1:6432 the way the
# tests expect (scripts/pgbouncer.ini: transaction mode in front of the
# local PostgreSQL, database "test", user postgres without a password),
# starting it if it does not. Safe to run again and again; it needs the
# pgbouncer binary (Debian's package pgbouncer; .ci/run installs it) and
# PostgreSQL up at 127.0.0.1:5432.
#
#   scripts/pgbouncer.sh          start it unless it answers
#   scripts/pgbouncer.sh stop     stop the one this script started
#
# Its files (the config copied from scripts/pgbouncer.ini, the user list,
# the pid file and the log) are in /tmp/bunqueue-pgbouncer. Run as root,
# it runs PgBouncer as the user postgres, since PgBouncer refuses root.
set -euo pipefail

DIR=/tmp/bunqueue-pgbouncer
INI=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pgbouncer.ini
START_WAIT=15 # seconds PgBouncer gets to answer

log() { printf '== %s\n' "$*"; }
die() { printf 'pgbouncer.sh: %s\n' "$*" >&2; exit 1; }

# answers reports whether PgBouncer passes a query to the database test.
answers() {
	psql "host=127.0.0.1 port=6432 user=postgres dbname=test connect_timeout=2" -tAc 'select 1' >/dev/null 2>&1
}

# as_owner runs its arguments as the user that owns PgBouncer's files.
as_owner() {
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

if [[ ${1:-} == stop ]]; then
	if [[ -s $DIR/pgbouncer.pid ]] && kill "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null; then
		log "PgBouncer stopped"
	fi
	exit 0
fi

if answers; then
	if [[ -f $DIR/pgbouncer.ini ]] && ! cmp -s "$INI" "$DIR/pgbouncer.ini"; then
		# Started by this script from an older scripts/pgbouncer.ini.
		install -m 0644 -o "$(stat -c %U "$DIR/pgbouncer.ini")" "$INI" "$DIR/pgbouncer.ini"
		psql "host=127.0.0.1 port=6432 user=postgres dbname=pgbouncer connect_timeout=2" -tAc 'RELOAD' >/dev/null
		log "PgBouncer is running; reloaded scripts/pgbouncer.ini"
		exit 0
	fi
	log "PgBouncer is running"
	exit 0
fi
command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]] || die "pgbouncer is not installed (apt-get install pgbouncer)"
PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
if ss -ltn 2>/dev/null | grep -q '127.0.0.1:6432 \|\*:6432 \|0.0.0.0:6432 '; then
	die "something listens on port 6432 but does not pass queries to the database test as user postgres: stop it (Debian's own service: service pgbouncer stop) and run this again"
fi

log "PgBouncer does not answer; starting it (files in $DIR)"
owner=$(id -un)
((EUID == 0)) && owner=postgres
install -d -m 0755 -o "$owner" "$DIR"
install -m 0644 -o "$owner" "$INI" "$DIR/pgbouncer.ini"
printf '"postgres" ""\n' >"$DIR/userlist.txt"
chown "$owner" "$DIR/userlist.txt"
rm -f "$DIR/pgbouncer.pid" # a stale one from a killed run
as_owner "$PGBOUNCER" -d "$DIR/pgbouncer.ini"

deadline=$((SECONDS + START_WAIT))
until answers; do
	if ((SECONDS >= deadline)); then
		[[ -s $DIR/pgbouncer.log ]] && tail -n 20 "$DIR/pgbouncer.log" >&2
		die "PgBouncer did not answer on 127.0.0.1:6432 within ${START_WAIT}s (log: $DIR/pgbouncer.log)"
	fi
	sleep 0.2
done
log "PgBouncer is up: $("$PGBOUNCER" --version | head -n 1)"
