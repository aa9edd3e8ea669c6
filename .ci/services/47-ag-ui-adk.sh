#!/usr/bin/env bash
# The real AG-UI adapter of Google ADK (ag-ui-adk, pinned, model through LiteLLM) serving the
# test app tests/backends/ag_ui/adk_app.py on uvicorn against the scripted LLM started by
# 10-llm.sh, offline (LiteLLM's bundled model cost map, no telemetry). See the header of
# .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    uvicorn on a random loopback port; waits for GET /agent/capabilities, then
#            makes one small run: the first run pays the adapter's lazy imports (many
#            seconds), here rather than in a test; prints A2A_TEST_AGUI_ADK_URL (route /agent)
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

AG_UI_ADK_VERSION=0.11.0
GOOGLE_ADK_VERSION=2.13.0
LITELLM_VERSION=1.110.2
AG_UI_PROTOCOL_VERSION=1.0.0
UVICORN_VERSION=0.55.0

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/ag-ui-adk-$AG_UI_ADK_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/ag-ui-adk"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_AGUI_READY_TIMEOUT:-120}"

log() { echo "[47-ag-ui-adk] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "ag-ui-adk==$AG_UI_ADK_VERSION" "google-adk==$GOOGLE_ADK_VERSION" \
    "litellm==$LITELLM_VERSION" "ag-ui-protocol==$AG_UI_PROTOCOL_VERSION" \
    "uvicorn==$UVICORN_VERSION"
}

# warm_up URL: one run to its end (RUN_FINISHED), so the lazy imports are done.
warm_up() {
  local url=$1 t0=$SECONDS body events
  body='{"threadId":"warm-up","runId":"warm-up-1","state":{},"tools":[],"context":[],'
  body+='"forwardedProps":{},"messages":[{"id":"warm-up-m1","role":"user","content":"warm up"}]}'
  events=$(curl -fsS -N -m "$READY_TIMEOUT" -H 'Content-Type: application/json' \
    -H 'Accept: text/event-stream' -d "$body" "$url/agent") || events=""
  if [[ $events != *'"RUN_FINISHED"'* ]]; then
    log "the warm-up run did not finish; log tail:"
    tail -n 40 "$LOG" >&2 || true
    exit 1
  fi
  log "warm-up run took $((SECONDS - t0)) s"
}

do_start() {
  local t0=$SECONDS port url pid
  [ -x "$VENV/bin/uvicorn" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  cp tests/backends/ag_ui/adk_app.py "$RUN_DIR/"
  port=$(free_port)
  (
    cd "$RUN_DIR"
    HOME="$RUN_DIR" LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY=False \
      OTEL_SDK_DISABLED=true GOOGLE_CLOUD_PROJECT='' GOOGLE_GENAI_USE_VERTEXAI='' \
      GOOGLE_API_KEY='' GEMINI_API_KEY='' AGUI_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/uvicorn" adk_app:app --host 127.0.0.1 --port "$port" \
      --no-access-log </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" "$url/agent/capabilities"
  log "ag-ui-adk listening on $url after $((SECONDS - t0)) s (pid $pid)"
  warm_up "$url"
  log "ag-ui-adk ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_AGUI_ADK_URL=$url"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
