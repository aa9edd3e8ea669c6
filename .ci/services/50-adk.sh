#!/usr/bin/env bash
# The real Google ADK API server (`adk api_server`, pinned) serving the test agent of
# tests/backends/adk/ (app `assistant`) against the scripted LLM started by 10-llm.sh, offline
# (LiteLLM's bundled model cost map, in-memory sessions, no telemetry). See the header of
# .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    `adk api_server` on a random loopback port in a copy of the agents folder;
#            waits for GET /list-apps; prints A2A_TEST_ADK_URL
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

GOOGLE_ADK_VERSION=2.13.0
LITELLM_VERSION=1.110.2

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/adk-$GOOGLE_ADK_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/adk"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_ADK_READY_TIMEOUT:-120}"

log() { echo "[50-adk] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "google-adk==$GOOGLE_ADK_VERSION" "litellm==$LITELLM_VERSION"
}

do_start() {
  local t0=$SECONDS port url pid
  [ -x "$VENV/bin/adk" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  # A copy: ADK writes next to its agents (.adk/, __pycache__) unless told otherwise.
  cp -r tests/backends/adk "$RUN_DIR/agents"
  port=$(free_port)
  (
    cd "$RUN_DIR/agents"
    HOME="$RUN_DIR" LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY=False \
      ADK_DISABLE_LOCAL_STORAGE=1 OTEL_SDK_DISABLED=true \
      GOOGLE_CLOUD_PROJECT= GOOGLE_GENAI_USE_VERTEXAI= GOOGLE_API_KEY= GEMINI_API_KEY= \
      ADK_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/adk" api_server --host 127.0.0.1 --port "$port" --no-reload \
      --session_service_uri memory:// --artifact_service_uri memory:// \
      --memory_service_uri memory:// . </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" "$url/list-apps"
  log "adk ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_ADK_URL=$url"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
