#!/usr/bin/env bash
# An AWS Bedrock AgentCore Runtime app (the bedrock-agentcore SDK's BedrockAgentCoreApp, pinned)
# from tests/backends/agentcore/, streaming the scripted LLM started by 10-llm.sh, offline. The
# app keeps each runtime session's history, so two turns of one session are visible in the
# scripted LLM's /_requests. See the header of .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    the app on a random loopback port; waits for GET /ping; prints A2A_TEST_AGENTCORE_URL
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

BEDROCK_AGENTCORE_VERSION=1.25.0

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/agentcore-$BEDROCK_AGENTCORE_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/agentcore"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_AGENTCORE_READY_TIMEOUT:-60}"

log() { echo "[55-agentcore] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "bedrock-agentcore==$BEDROCK_AGENTCORE_VERSION" httpx
}

do_start() {
  local t0=$SECONDS port url pid
  [ -x "$VENV/bin/python" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  port=$(free_port)
  # The SDK's app.run binds 127.0.0.1 outside a container; the app passes the host anyway.
  AGENTCORE_TEST_PORT="$port" AGENTCORE_TEST_LLM_URL="$A2A_TEST_LLM_URL" \
    OTEL_SDK_DISABLED=true AWS_EC2_METADATA_DISABLED=true \
    setsid "$VENV/bin/python" tests/backends/agentcore/app.py </dev/null >"$LOG" 2>&1 &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" "$url/ping"
  log "agentcore app ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_AGENTCORE_URL=$url"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
