#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: loopback only, a random free port,
# durability off (fsync, synchronous_commit, full_page_writes) because the data is
# thrown away at the end of the run.
#
#   install  apt-get install postgresql if no server binaries are present
#   start    initdb + pg_ctl start as the postgres user; prints
#            export A2A_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:PORT/postgres
#   stop     immediate shutdown, remove the data directory (a no-op if start never ran)
#
# Everything but the export line goes to stderr: .ci/run sources stdout.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

STATE="${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"
# The cluster lives in its own directory owned by the postgres user ($STATE is
# private to root); its path is recorded in $STATE so stop can find it.
PG_DIR_FILE="$STATE/postgres.dir"

pg_bin() {
  local dirs
  dirs=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$dirs" ] && [ -x "$dirs/initdb" ] && echo "$dirs"
}

# initdb refuses to run as root: run the server tools as the postgres user then.
as_postgres() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "${1:-}" in
  install)
    if pg_bin >/dev/null; then
      echo "postgresql already installed: $(pg_bin)" >&2
      exit 0
    fi
    if [ "$(id -u)" != 0 ]; then
      echo "postgresql is missing and installing it needs root" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends postgresql >&2
    ;;
  start)
    PGBIN=$(pg_bin) || { echo "postgresql is not installed (run install first)" >&2; exit 1; }
    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/a2a-postgres.XXXXXX")
    echo "$PG_DIR" >"$PG_DIR_FILE"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DIR"; fi
    PORT=$(free_port)
    as_postgres "$PGBIN/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 \
      --locale=C.UTF-8 --no-sync >&2
    as_postgres "$PGBIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 -o \
      "-c listen_addresses=127.0.0.1 -p $PORT -k $PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >&2
    echo "export A2A_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:$PORT/postgres"
    ;;
  stop)
    [ -f "$PG_DIR_FILE" ] || exit 0
    PG_DIR=$(cat "$PG_DIR_FILE")
    if PGBIN=$(pg_bin); then
      as_postgres "$PGBIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >&2 || true
    fi
    rm -rf "$PG_DIR" "$PG_DIR_FILE"
    ;;
  *)
    echo "usage: $0 install|start|stop" >&2
    exit 2
    ;;
esac
