#!/usr/bin/env bash
# The real Hermes Agent API server (hermes-agent, pinned), in its own venv, against the
# scripted LLM started by 10-llm.sh. Approvals are manual (deterministic) and tirith is off
# (it would try to download a binary). Exports A2A_TEST_HERMES_URL and A2A_TEST_HERMES_KEY.
# Hermes exits with code 1 on SIGTERM by design; stop does not treat that as an error.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

HERMES_VERSION=0.19.0
VENV="$A2A_CI_CACHE/hermes-$HERMES_VERSION-venv"
ROOT="$A2A_CI_STATE/hermes"
PIDFILE="$A2A_CI_STATE/hermes.pid"
LOG="$A2A_CI_STATE/hermes.log"

case "${1:-}" in
install)
  if [ ! -x "$VENV/bin/hermes" ] || ! "$VENV/bin/python" -c 'import aiohttp' 2>/dev/null; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "hermes-agent==$HERMES_VERSION" aiohttp==3.14.1 >&2
  fi
  ;;
start)
  need_llm_url
  mkdir -p "$ROOT/home/.hermes"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  key="hermes-ci-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  approval_timeout="${A2A_CI_HERMES_APPROVAL_TIMEOUT:-60}"
  cat >"$ROOT/home/.hermes/config.yaml" <<YAML
model:
  provider: custom
  base_url: $A2A_TEST_LLM_URL/v1
  default: fake-model
  api_key: fake-key
  context_length: 131072
approvals:
  mode: manual
  timeout: $approval_timeout
security:
  tirith_enabled: false
YAML
  HOME="$ROOT/home" HERMES_HOME="$ROOT/home/.hermes" API_SERVER_ENABLED=true \
    API_SERVER_KEY="$key" API_SERVER_HOST=127.0.0.1 API_SERVER_PORT="$port" \
    TIRITH_ENABLED=false \
    setsid "$VENV/bin/hermes" gateway run -v </dev/null >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 600); do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "Hermes exited during start; log tail:" >&2
      tail -n 40 "$LOG" >&2
      exit 1
    fi
    if grep -q "Refusing to start" "$LOG"; then
      echo "Hermes refused to start; log tail:" >&2
      tail -n 40 "$LOG" >&2
      exit 1
    fi
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      echo "export A2A_TEST_HERMES_URL=http://127.0.0.1:$port"
      echo "export A2A_TEST_HERMES_KEY=$key"
      exit 0
    fi
    sleep 0.2
  done
  echo "Hermes not ready after 120 s; log tail:" >&2
  tail -n 40 "$LOG" >&2
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
