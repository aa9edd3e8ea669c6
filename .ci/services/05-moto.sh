#!/usr/bin/env bash
# moto in server mode: a local DynamoDB emulator for the DynamoDB store tests.
# See the header of .ci/run for the interface.
#
#   install  a venv with moto[server,dynamodb] under $A2A_CI_CACHE (.ci/run creates the
#            project venv only after the services have started)
#   start    tests/stores/moto_server.py (moto answering one request at a time, as the tests
#            need: see its docstring) on a free loopback port; waits until /moto-api/ answers;
#            prints A2A_TEST_DYNAMODB_ENDPOINT
#   stop     SIGTERM, then SIGKILL after 10 s
#
# Without A2A_TEST_DYNAMODB_ENDPOINT the tests start the same server themselves
# (tests/stores/dynamo_support.py); CI starts it here, so that the tests' path for a given
# endpoint stays tested.
#
# Outside .ci/run: A2A_CI_STATE=$(mktemp -d) bash .ci/services/05-moto.sh install, then start.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

MOTO_VERSION=5.2.5

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/moto-$MOTO_VERSION"
SERVER="$(cd "$(dirname "$0")/../.." && pwd)/tests/stores/moto_server.py"
RUN_DIR="$A2A_CI_STATE/moto"
PID_FILE="$RUN_DIR/pid"

log() { echo "[05-moto] $*" >&2; }

do_install() {
  if [ -f "$VENV/.installed" ] && "$VENV/bin/python" -c 'import moto.server' 2>/dev/null; then
    log "moto $MOTO_VERSION cached"
    return
  fi
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "moto[server,dynamodb]==$MOTO_VERSION" >&2
  touch "$VENV/.installed"
  log "moto $MOTO_VERSION installed"
}

do_start() {
  mkdir -p "$RUN_DIR"
  rm -f "$RUN_DIR/port"
  # the server prints its port once it listens
  nohup "$VENV/bin/python" "$SERVER" >"$RUN_DIR/port" 2>"$RUN_DIR/log" &
  echo $! >"$PID_FILE"
  local port="" i
  for i in $(seq 1 200); do
    if [ -s "$RUN_DIR/port" ]; then
      port=$(cat "$RUN_DIR/port")
      if "$VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
        "http://127.0.0.1:$port/moto-api/" 2>/dev/null; then
        log "moto listening on 127.0.0.1:$port"
        echo "export A2A_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:$port"
        return
      fi
    fi
    kill -0 "$(cat "$PID_FILE")" 2>/dev/null || break
    sleep 0.1
  done
  log "moto did not start; log follows"
  cat "$RUN_DIR/log" >&2
  do_stop
  exit 1
}

do_stop() {
  stop_pidfile "$PID_FILE" 10
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) do_stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
