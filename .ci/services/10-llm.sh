#!/usr/bin/env bash
# The project's scripted OpenAI-compatible LLM (tests/backends/scripted_llm.py) on a free
# loopback port, in its own small venv so it runs before the project's venv exists.
# Exports A2A_TEST_LLM_URL: the server root; the OpenAI API is under $A2A_TEST_LLM_URL/v1,
# the test-control routes are $A2A_TEST_LLM_URL/_requests and /_reset.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

VENV="$A2A_CI_CACHE/llm-venv"
PIDFILE="$A2A_CI_STATE/llm.pid"
LOG="$A2A_CI_STATE/llm.log"

case "${1:-}" in
install)
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import aiohttp' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q aiohttp==3.14.5 >&2
  fi
  ;;
start)
  portfile="$A2A_CI_STATE/llm.port"
  rm -f "$portfile"
  setsid "$VENV/bin/python" tests/backends/scripted_llm.py --host 127.0.0.1 --port 0 \
    --port-file "$portfile" --log "$A2A_CI_STATE/llm-requests.jsonl" \
    --danger-path "$A2A_CI_STATE/danger-target" </dev/null >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 150); do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "scripted LLM exited during start; log tail:" >&2
      tail -n 30 "$LOG" >&2
      exit 1
    fi
    if [ -s "$portfile" ] && curl -fsS "http://127.0.0.1:$(cat "$portfile")/v1/models" >/dev/null 2>&1; then
      echo "export A2A_TEST_LLM_URL=http://127.0.0.1:$(cat "$portfile")"
      exit 0
    fi
    sleep 0.2
  done
  echo "scripted LLM not ready after 30 s; log tail:" >&2
  tail -n 30 "$LOG" >&2
  exit 1
  ;;
stop)
  stop_pidfile "$PIDFILE" 15
  ;;
*)
  echo "usage: $0 install|start|stop" >&2
  exit 2
  ;;
esac
