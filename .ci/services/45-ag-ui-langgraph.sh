#!/usr/bin/env bash
# The real AG-UI adapter of LangGraph (ag-ui-langgraph, pinned) serving the test app
# tests/backends/ag_ui/langgraph_app.py on uvicorn against the scripted LLM started by
# 10-llm.sh, offline. See the header of .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    uvicorn on a random loopback port with a random bearer token; waits for
#            GET /agent/health; prints A2A_TEST_AGUI_LANGGRAPH_URL (routes /agent,
#            /agent-legacy) and A2A_TEST_AGUI_TOKEN (the token the app demands)
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

AG_UI_LANGGRAPH_VERSION=0.0.47
AG_UI_PROTOCOL_VERSION=1.0.0
LANGGRAPH_VERSION=1.2.22
LANGCHAIN_OPENAI_VERSION=1.7.4
FASTAPI_VERSION=0.165.0
UVICORN_VERSION=0.55.0

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/ag-ui-langgraph-$AG_UI_LANGGRAPH_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/ag-ui-langgraph"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_AGUI_READY_TIMEOUT:-120}"

log() { echo "[45-ag-ui-langgraph] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "ag-ui-langgraph==$AG_UI_LANGGRAPH_VERSION" "ag-ui-protocol==$AG_UI_PROTOCOL_VERSION" \
    "langgraph==$LANGGRAPH_VERSION" "langchain-openai==$LANGCHAIN_OPENAI_VERSION" \
    "fastapi==$FASTAPI_VERSION" "uvicorn==$UVICORN_VERSION"
}

do_start() {
  local t0=$SECONDS port url pid token
  [ -x "$VENV/bin/uvicorn" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  cp tests/backends/ag_ui/langgraph_app.py "$RUN_DIR/"
  port=$(free_port)
  token=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
  (
    cd "$RUN_DIR"
    HOME="$RUN_DIR" LANGSMITH_TRACING=false LANGCHAIN_TRACING_V2=false \
      LANGSMITH_API_KEY='' LANGCHAIN_API_KEY='' AGUI_TEST_TOKEN="$token" \
      AGUI_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/uvicorn" langgraph_app:app --host 127.0.0.1 --port "$port" \
      --no-access-log </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" -H "Authorization: Bearer $token" "$url/agent/health"
  log "ag-ui-langgraph ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_AGUI_LANGGRAPH_URL=$url"
  echo "export A2A_TEST_AGUI_TOKEN=$token"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
