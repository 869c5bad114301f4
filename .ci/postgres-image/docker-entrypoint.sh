#!/bin/sh
# The entrypoint of pgtx-local/postgres (.ci/postgres-image/build): Debian's
# postgresql-15, started as the official postgres image starts it, for what
# testcontainers-go's postgres module and pgtxtest ask of that image:
#
#   - POSTGRES_PASSWORD (required, unless POSTGRES_HOST_AUTH_METHOD=trust),
#     POSTGRES_USER (default postgres), POSTGRES_DB (default: the user),
#     POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default scram-sha-256),
#     PGDATA (default /var/lib/postgresql/data);
#   - CMD `postgres [-c name=value ...]`: the arguments go to both runs of the
#     server below; any other command is run as is;
#   - on an empty PGDATA: initdb, a first server on the Unix socket only, the
#     database and /docker-entrypoint-initdb.d/*.sh|*.sql, stop, then the
#     server for good on 0.0.0.0:5432 (listen_addresses='*'), as the postgres
#     user, in the foreground (PID 1). So "database system is ready to accept
#     connections" is logged twice, which is what the module waits for.
#   - TCP connections from anywhere but the container's loopback need the
#     password (scram-sha-256); the Unix socket and loopback are trusted.
set -eu

bindir=/usr/lib/postgresql/15/bin
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:=}"
: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
: "${POSTGRES_INITDB_ARGS:=}"
export PGDATA POSTGRES_USER POSTGRES_DB

log() { printf '%s\n' "docker-entrypoint: $*" >&2; }

# `docker run IMAGE -c x=y` means `postgres -c x=y`.
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
	set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
	exec "$@"
fi
shift

if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	chmod 2775 /var/run/postgresql
	# The rest runs as postgres, with this environment (setpriv keeps it).
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		log "error: the database is uninitialized and POSTGRES_PASSWORD is not set;"
		log "set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust to allow connections without one"
		exit 1
	fi
	pwfile=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of arguments
	"$bindir/initdb" --username="$POSTGRES_USER" --pwfile="$pwfile" \
		--auth-local=trust --auth-host=trust --encoding=UTF8 --locale=C.UTF-8 \
		$POSTGRES_INITDB_ARGS
	rm -f "$pwfile"
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
	printf "\nlisten_addresses = '*'\njit = off\n" >>"$PGDATA/postgresql.conf"

	# The first server: Unix socket only, with the caller's settings (pg_ctl
	# hands -o to a shell: each argument goes in single quotes).
	opts="-c listen_addresses='' -p 5432"
	for a in "$@"; do
		opts="$opts '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'"
	done
	"$bindir/pg_ctl" -D "$PGDATA" -w -t 60 -o "$opts" start
	psql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password "$@"; }
	if [ "$POSTGRES_DB" != postgres ]; then
		psql --dbname postgres --set db="$POSTGRES_DB" <<-'EOSQL'
			CREATE DATABASE :"db";
		EOSQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) log "running $f"; . "$f" ;;
		*.sql) log "running $f"; psql --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) log "running $f"; gzip -dc "$f" | psql --dbname "$POSTGRES_DB" ;;
		*) [ ! -e "$f" ] || log "ignoring $f" ;;
		esac
	done
	"$bindir/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop
	log "PostgreSQL init process complete; ready for start up."
else
	log "PostgreSQL database directory appears to contain a database; skipping initialization"
fi

exec "$bindir/postgres" "$@"
