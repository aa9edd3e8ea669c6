#!/usr/bin/env bash
# The real LangGraph Agent Server (`langgraph dev`, in-memory runtime, pinned) serving the
# test graph of tests/backends/langgraph/ against the scripted LLM started by 10-llm.sh,
# offline (tracing, LangSmith and telemetry off). See the header of .ci/run for the interface.
#
#   install  its own venv in $A2A_CI_CACHE (reused across runs)
#   start    `langgraph dev` on a random loopback port in a copy of the graph folder;
#            waits for GET /ok; prints A2A_TEST_LANGGRAPH_URL (assistant id `agent`)
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

LANGGRAPH_CLI_VERSION=0.4.40
LANGGRAPH_API_VERSION=0.16.7
LANGGRAPH_VERSION=1.2.24
LANGCHAIN_OPENAI_VERSION=1.7.4

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

VENV="$A2A_CI_CACHE/langgraph-$LANGGRAPH_API_VERSION-venv"
RUN_DIR="$A2A_CI_STATE/langgraph"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/server.log"
READY_TIMEOUT="${A2A_LANGGRAPH_READY_TIMEOUT:-120}"

log() { echo "[40-langgraph] $*" >&2; }

do_install() {
  pip_venv "$VENV" \
    "langgraph-cli[inmem]==$LANGGRAPH_CLI_VERSION" "langgraph-api==$LANGGRAPH_API_VERSION" \
    "langgraph==$LANGGRAPH_VERSION" "langchain-openai==$LANGCHAIN_OPENAI_VERSION"
}

do_start() {
  local t0=$SECONDS port url pid
  [ -x "$VENV/bin/langgraph" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  # A copy: `langgraph dev` writes its state (.langgraph_api/) next to langgraph.json.
  cp -r tests/backends/langgraph "$RUN_DIR/app"
  port=$(free_port)
  (
    cd "$RUN_DIR/app"
    HOME="$RUN_DIR" LANGSMITH_TRACING=false LANGCHAIN_TRACING_V2=false \
      LANGGRAPH_CLI_NO_ANALYTICS=1 LANGSMITH_API_KEY= LANGCHAIN_API_KEY= \
      LANGGRAPH_TEST_LLM_URL="${A2A_TEST_LLM_URL%/}/v1" \
      exec setsid "$VENV/bin/langgraph" dev --no-browser --no-reload --n-jobs-per-worker 10 \
      --host 127.0.0.1 --port "$port" </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  url="http://127.0.0.1:$port"
  wait_ready "$pid" "$LOG" "$READY_TIMEOUT" "$url/ok"
  log "langgraph ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_LANGGRAPH_URL=$url"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) stop_pidfile "$PID_FILE" 15 ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
