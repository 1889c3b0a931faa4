#!/usr/bin/env bash
# pgtest.sh — a throwaway PostgreSQL server for tests.
#
#   scripts/pgtest.sh start [DIR]   initdb into DIR (a new temp dir if omitted),
#                                   start on a free 127.0.0.1 port, print the URL
#                                   (and write it to DIR/url)
#   scripts/pgtest.sh stop DIR      stop the server and remove DIR
#   scripts/pgtest.sh stop --keep DIR
#                                   stop the server and keep DIR: start DIR
#                                   then starts the same data again
#
# Only the URL goes to stdout, so: export RELAY_TEST_DATABASE_URL=$(scripts/pgtest.sh start /tmp/pg)
# The server trusts every connection from 127.0.0.1 and its own socket
# directory, and listens nowhere else. It runs without fsync for speed unless
# PGTEST_DURABLE=1; PGTEST_SETTINGS, lines of "name = value", are added to its
# configuration after the script's own (benchmarks of server settings). As
# root it runs as the `postgres` system user (created as `pgtest` if there is
# no such user), since Postgres refuses to run as root.
# When no server binaries are found and we are root, the Debian package is
# installed with apt-get.
set -euo pipefail

MARKER=.pgtest
PG_USER=

log() { printf 'pgtest: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

usage() {
	cat >&2 <<'EOF'
usage: pgtest.sh start [DIR]   start a throwaway Postgres, print its URL
       pgtest.sh stop DIR      stop it and remove DIR
       pgtest.sh stop --keep DIR
                               stop it and keep DIR
EOF
	exit 2
}

# find_bindir prints the directory holding initdb, pg_ctl and postgres.
find_bindir() {
	local dir
	if command -v pg_config >/dev/null 2>&1; then
		dir=$(pg_config --bindir 2>/dev/null || true)
		if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
			printf '%s\n' "$dir"
			return 0
		fi
	fi
	dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
		printf '%s\n' "$dir"
		return 0
	fi
	return 1
}

install_postgres() {
	[[ $(id -u) -eq 0 ]] || die "no PostgreSQL server binaries found (initdb, pg_ctl); install the postgresql package or put pg_config on PATH"
	command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL server binaries found and no apt-get to install them"
	log "installing PostgreSQL with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2 || die "apt-get update failed"
	local pkg=postgresql
	if apt-cache show postgresql-15 >/dev/null 2>&1; then
		pkg=postgresql-15
	fi
	apt-get install -y -qq --no-install-recommends "$pkg" >&2 || die "apt-get install $pkg failed"
}

# pick_user sets PG_USER, the unprivileged user that runs the server when we
# are root (empty: run as ourselves).
pick_user() {
	PG_USER=
	[[ $(id -u) -eq 0 ]] || return 0
	if id -u postgres >/dev/null 2>&1; then
		PG_USER=postgres
		return 0
	fi
	if ! id -u pgtest >/dev/null 2>&1; then
		log "creating system user pgtest"
		if command -v useradd >/dev/null 2>&1; then
			useradd --system --no-create-home --shell /usr/sbin/nologin pgtest >&2 || die "useradd pgtest failed"
		else
			adduser --system --no-create-home --group pgtest >&2 || die "adduser pgtest failed"
		fi
	fi
	PG_USER=pgtest
}

# as_user runs a command as PG_USER (or as ourselves when it is empty).
as_user() {
	if [[ -z "$PG_USER" ]]; then
		"$@"
	elif command -v runuser >/dev/null 2>&1; then
		runuser -u "$PG_USER" -- "$@"
	else
		su -s /bin/sh "$PG_USER" -c "$(printf '%q ' "$@")"
	fi
}

# port_in_use reports whether something accepts connections on 127.0.0.1:$1.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

random_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 40000))
		if ! port_in_use "$port"; then
			printf '%s\n' "$port"
			return 0
		fi
	done
	return 1
}

# data_owner sets PG_USER to the owner of $1/data when we are root (the
# server runs as that user), else to nothing.
data_owner() {
	PG_USER=
	if [[ $(id -u) -eq 0 ]]; then
		PG_USER=$(stat -c %U "$1/data")
	fi
}

# start_server starts the cluster in $1/data (binaries in $2) on a free
# 127.0.0.1 port, waits until it accepts connections, writes its URL and
# port into $1, and prints the URL.
start_server() {
	local dir=$1 bindir=$2
	local port from started=
	for _ in 1 2 3 4 5; do
		port=$(random_port) || die "no free TCP port found on 127.0.0.1"
		log "starting on 127.0.0.1:$port"
		# A kept directory's log holds earlier starts: look only at this one's lines.
		from=$(($(wc -l <"$dir/log") + 1))
		if as_user "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 -o "-p $port" start >>"$dir/log" 2>&1; then
			started=1
			break
		fi
		# Lost a race for the port, or a real failure: look at the log.
		if ! tail -n +"$from" "$dir/log" | grep -q 'could not bind\|Address already in use'; then
			break
		fi
		log "port $port was taken, trying another"
	done
	[[ -n "$started" ]] || die "postgres did not start; see $dir/log"

	local ready=
	for _ in $(seq 1 60); do
		if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres >/dev/null 2>&1; then
			ready=1
			break
		fi
		sleep 0.5
	done
	[[ -n "$ready" ]] || die "postgres started but does not accept connections; see $dir/log"

	local url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	printf '%s\n' "$url" >"$dir/url"
	printf '%s\n' "$port" >"$dir/port"
	log "ready; stop with: $0 stop $dir"
	printf '%s\n' "$url"
}

cmd_start() {
	local dir=${1:-}
	if [[ -z "$dir" ]]; then
		dir=$(mktemp -d "${TMPDIR:-/tmp}/pgtest.XXXXXX") || die "mktemp failed"
	fi
	mkdir -p "$dir" || die "cannot create $dir"
	dir=$(cd "$dir" && pwd -P)
	if [[ -f "$dir/url" && -f "$dir/data/postmaster.pid" ]]; then
		# A pid file outlives a machine restart: only a server that
		# answers makes the directory busy.
		if port_in_use "$(cat "$dir/port" 2>/dev/null || echo 0)"; then
			die "$dir already holds a running server ($(cat "$dir/url")); stop it first"
		fi
		log "$dir holds a stale server (nothing answers on its port); starting afresh"
	fi
	if [[ -n "$(ls -A "$dir")" && ! -f "$dir/$MARKER" ]]; then
		die "$dir is not empty and was not made by pgtest.sh; give an empty or new directory"
	fi
	if [[ -f "$dir/$MARKER" && -f "$dir/kept" && -d "$dir/data" ]]; then
		# Stopped with --keep: start the same cluster again, its data
		# as it was left, on a free port.
		local bindir
		bindir=$(find_bindir) || die "cannot find pg_ctl to start the server kept in $dir"
		data_owner "$dir"
		cd "$dir"
		log "starting the server kept in $dir again"
		start_server "$dir" "$bindir"
		rm -f "$dir/kept"
		return
	fi

	local bindir
	if ! bindir=$(find_bindir); then
		install_postgres
		bindir=$(find_bindir) || die "PostgreSQL installed but initdb/pg_ctl still not found"
	fi
	log "using $bindir ($("$bindir/postgres" --version 2>/dev/null || echo unknown version))"

	pick_user
	rm -rf "${dir:?}/data" "${dir:?}/sock"
	: >"$dir/$MARKER"
	mkdir -p "$dir/sock"
	: >"$dir/log"
	if [[ -n "$PG_USER" ]]; then
		chown -R "$PG_USER" "$dir" || die "cannot chown $dir to $PG_USER"
		as_user test -w "$dir" -a -x "$dir" ||
			die "user $PG_USER cannot write $dir (is a parent directory closed to it?); use a directory under /tmp"
	fi
	chmod 700 "$dir/sock"
	cd "$dir"

	log "initdb into $dir/data (log: $dir/log)"
	as_user "$bindir/initdb" -D "$dir/data" -U postgres -E UTF8 --no-locale --auth=trust >>"$dir/log" 2>&1 ||
		die "initdb failed; see $dir/log"

	cat >"$dir/data/pg_hba.conf" <<'EOF'
# pgtest.sh: trust the socket directory and 127.0.0.1, nothing else.
local all all              trust
host  all all 127.0.0.1/32 trust
EOF
	{
		echo "# pgtest.sh"
		echo "listen_addresses = '127.0.0.1'"
		echo "unix_socket_directories = '$dir/sock'"
		echo "unix_socket_permissions = 0700"
		echo "max_connections = 300"
		if [[ "${PGTEST_DURABLE:-0}" != 1 ]]; then
			echo "fsync = off"
			echo "synchronous_commit = off"
			echo "full_page_writes = off"
		fi
		if [[ -n "${PGTEST_SETTINGS:-}" ]]; then
			echo "# PGTEST_SETTINGS"
			printf '%s\n' "$PGTEST_SETTINGS"
		fi
	} >>"$dir/data/postgresql.conf"

	start_server "$dir" "$bindir"
}

cmd_stop() {
	local keep=
	if [[ ${1:-} == --keep ]]; then
		keep=1
		shift
	fi
	local dir=${1:-}
	[[ -n "$dir" ]] || usage
	[[ -d "$dir" ]] || die "$dir does not exist"
	dir=$(cd "$dir" && pwd -P)
	[[ -f "$dir/$MARKER" ]] || die "$dir was not made by pgtest.sh; not touching it"
	if [[ -f "$dir/data/postmaster.pid" ]]; then
		local bindir
		bindir=$(find_bindir) || die "cannot find pg_ctl to stop the server in $dir"
		data_owner "$dir"
		cd "$dir"
		if as_user "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
			as_user "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >>"$dir/log" 2>&1 ||
				die "pg_ctl stop failed; see $dir/log"
		else
			log "no server running in $dir"
		fi
		cd /
	fi
	if [[ -n "$keep" ]]; then
		: >"$dir/kept"
		log "stopped; kept $dir (start it again: $0 start $dir)"
		return
	fi
	rm -rf "${dir:?}"
	log "stopped and removed $dir"
}

case "${1:-}" in
start)
	shift
	[[ $# -le 1 ]] || usage
	cmd_start "${1:-}"
	;;
stop)
	shift
	[[ $# -eq 1 || ($# -eq 2 && $1 == --keep) ]] || usage
	cmd_stop "$@"
	;;
*) usage ;;
esac
