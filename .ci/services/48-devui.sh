#!/usr/bin/env bash
# Microsoft Agent Framework DevUI (`devui`, pinned), an OpenAI Responses API server, serving the
# test entity of tests/backends/devui/ (entity `assistant`) against the scripted LLM started by
# 10-llm.sh, offline, with bearer auth on. See the header of .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    `devui --headless` on a random loopback port with a random token; waits for
#            GET /health, then makes one streamed request (DevUI's first streamed request after
#            a start fails while it loads the entity); prints A2A_TEST_DEVUI_URL and
#            A2A_TEST_DEVUI_TOKEN
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

DEVUI_VERSION=1.0.0b261022
AF_CORE_VERSION=1.23.0
AF_OPENAI_VERSION=1.17.0

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/devui-$DEVUI_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/devui"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_DEVUI_READY_TIMEOUT:-120}"

log() { echo "[48-devui] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "agent-framework-devui==$DEVUI_VERSION" "agent-framework-core==$AF_CORE_VERSION" \
    "agent-framework-openai==$AF_OPENAI_VERSION"
}

# warm_up URL TOKEN: one streamed request, its outcome ignored (the entity loads lazily, and
# the first streamed request after a start ends in an error event).
warm_up() {
  curl -sS -o /dev/null -m 30 -H "Authorization: Bearer $2" -H "Content-Type: application/json" \
    -d '{"model":"assistant","input":"warm up","stream":true,"metadata":{"entity_id":"assistant"}}' \
    "$1/v1/responses" || true
}

do_start() {
  local t0=$SECONDS port url pid token
  [ -x "$VENV/bin/devui" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  cp -r tests/backends/devui "$RUN_DIR/entities"
  port=$(free_port)
  token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
  (
    cd "$RUN_DIR"
    HOME="$RUN_DIR" OTEL_SDK_DISABLED=true OPENAI_API_KEY='' \
      DEVUI_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/devui" --headless --no-open --host 127.0.0.1 --port "$port" \
      --auth-token "$token" "$RUN_DIR/entities" </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" "$url/health"
  warm_up "$url" "$token"
  log "devui ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_DEVUI_URL=$url"
  echo "export A2A_TEST_DEVUI_TOKEN=$token"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
