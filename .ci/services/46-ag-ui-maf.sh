#!/usr/bin/env bash
# The real AG-UI adapter of Microsoft Agent Framework (agent-framework-ag-ui, pinned) serving
# the test app tests/backends/ag_ui/maf_app.py on uvicorn against the scripted LLM started by
# 10-llm.sh, offline. Its own venv: it pins ag-ui-protocol<0.2, the other AG-UI adapters 1.0.
# See the header of .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    uvicorn on a random loopback port; waits for the app's GET /ready;
#            prints A2A_TEST_AGUI_MAF_URL (route /agent)
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

AGENT_FRAMEWORK_AG_UI_VERSION=1.7.0
AGENT_FRAMEWORK_CORE_VERSION=1.23.0
AGENT_FRAMEWORK_OPENAI_VERSION=1.17.0
UVICORN_VERSION=0.55.0

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/ag-ui-maf-$AGENT_FRAMEWORK_AG_UI_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/ag-ui-maf"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_AGUI_READY_TIMEOUT:-120}"

log() { echo "[46-ag-ui-maf] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "agent-framework-ag-ui==$AGENT_FRAMEWORK_AG_UI_VERSION" \
    "agent-framework-core==$AGENT_FRAMEWORK_CORE_VERSION" \
    "agent-framework-openai==$AGENT_FRAMEWORK_OPENAI_VERSION" "uvicorn==$UVICORN_VERSION"
}

do_start() {
  local t0=$SECONDS port url pid
  [ -x "$VENV/bin/uvicorn" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  cp tests/backends/ag_ui/maf_app.py "$RUN_DIR/"
  port=$(free_port)
  (
    cd "$RUN_DIR"
    HOME="$RUN_DIR" OTEL_SDK_DISABLED=true ENABLE_OTEL=false OPENAI_API_KEY='' \
      AGUI_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/uvicorn" maf_app:app --host 127.0.0.1 --port "$port" \
      --no-access-log </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" "$url/ready"
  log "agent-framework-ag-ui ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_AGUI_MAF_URL=$url"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
