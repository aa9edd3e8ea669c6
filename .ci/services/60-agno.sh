#!/usr/bin/env bash
# The real Agno AgentOS (pinned agno[os], served by uvicorn) running the test app of
# tests/backends/agno/ against the scripted LLM started by 10-llm.sh, offline (telemetry off).
# See the header of .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    `uvicorn app:app` on a random loopback port from a copy of the app folder, sessions
#            in SQLite under $A2A_CI_STATE, a random OS_SECURITY_KEY; waits for GET /health;
#            prints A2A_TEST_AGNO_URL and A2A_TEST_AGNO_KEY (agent id `assistant`)
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

AGNO_VERSION=3.1.10
UVICORN_VERSION=0.54.0
SQLALCHEMY_VERSION=2.1.9
OPENAI_VERSION=3.57.0

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/agno-$AGNO_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/agno"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_AGNO_READY_TIMEOUT:-120}"

log() { echo "[60-agno] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "agno[os]==$AGNO_VERSION" \
    "uvicorn==$UVICORN_VERSION" "sqlalchemy==$SQLALCHEMY_VERSION" "openai==$OPENAI_VERSION"
}

do_start() {
  local t0=$SECONDS port url pid key
  [ -x "$VENV/bin/uvicorn" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  cp -r tests/backends/agno "$RUN_DIR/app"
  port=$(free_port)
  key="agno-ci-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  (
    cd "$RUN_DIR/app"
    HOME="$RUN_DIR" AGNO_TELEMETRY=false OS_SECURITY_KEY="$key" \
      AGNO_TEST_DB_FILE="$RUN_DIR/agno.db" AGNO_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/uvicorn" app:app --host 127.0.0.1 --port "$port" \
      </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" -H "Authorization: Bearer $key" "$url/health"
  log "agno ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_AGNO_URL=$url"
  echo "export A2A_TEST_AGNO_KEY=$key"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
