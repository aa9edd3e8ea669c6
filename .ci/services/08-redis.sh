#!/usr/bin/env bash
# A throwaway Redis for the tests: loopback only, a random free port, no persistence, an ACL
# user with a password (as a managed Redis or Valkey has one), the default user disabled.
#
#   install  apt-get install redis-server if it is missing (Debian 12 has no valkey-server
#            package; Valkey speaks the same protocol, see docs/scale-out.md)
#   start    prints
#            export A2A_TEST_REDIS_URL=redis://gateway:PASSWORD@127.0.0.1:PORT/0
#            export A2A_TEST_REDIS_SERVER=<redis-server binary> (fault tests start their own)
#   stop     stops it (a no-op if start never ran)
#
# Everything but the export lines goes to stderr: .ci/run sources stdout.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

STATE="${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"
PIDFILE="$STATE/redis.pid"

case "${1:-}" in
  install)
    if command -v redis-server >/dev/null; then
      echo "redis-server already installed: $(redis-server --version)" >&2
      exit 0
    fi
    if [ "$(id -u)" != 0 ]; then
      echo "redis-server is missing and installing it needs root" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends redis-server >&2 \
      || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends redis-server >&2; }
    ;;
  start)
    SERVER=$(command -v redis-server) || { echo "redis-server is not installed" >&2; exit 1; }
    PORT=$(free_port)
    PASSWORD=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    mkdir -p "$STATE/redis"
    setsid "$SERVER" --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no \
      --dir "$STATE/redis" --logfile "$STATE/redis/server.log" \
      --user default off \
      --user gateway on ">$PASSWORD" "~*" "&*" "+@all" \
      >/dev/null 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 100); do
      if redis-cli -p "$PORT" --user gateway --pass "$PASSWORD" --no-auth-warning ping 2>/dev/null \
        | grep -q PONG; then
        echo "export A2A_TEST_REDIS_URL=redis://gateway:$PASSWORD@127.0.0.1:$PORT/0"
        echo "export A2A_TEST_REDIS_SERVER=$SERVER"
        exit 0
      fi
      sleep 0.1
    done
    echo "redis-server did not answer on port $PORT" >&2
    cat "$STATE/redis/server.log" >&2 || true
    exit 1
    ;;
  stop)
    stop_pidfile "$PIDFILE" 5
    ;;
  *)
    echo "usage: $0 install|start|stop" >&2
    exit 2
    ;;
esac
