#!/usr/bin/env bash
# A2A clients that are deployed today, in releases older than the project's own a2a-sdk: the
# interop tests (tests/interop) drive each one as a subprocess against a real gateway.
# See the header of .ci/run for the interface.
#
#   install  under $A2A_CI_CACHE (each kept while its marker file is there and it imports):
#              a venv with a2a-sdk 0.3.22, a venv with a2a-sdk 0.2.16, each with httpx-sse
#              0.4.3 (those SDKs ask for >=0.4; 0.4 is the SSE decoder deployed with them,
#              which dispatches an empty event for a blank line once an id was seen)
#              a node_modules dir with @a2a-js/sdk 0.3.1 (node 20 or later on PATH)
#   start    nothing runs: prints where they are
#              A2A_TEST_LEGACY_SDK03_PYTHON   the 0.3.22 venv's python
#              A2A_TEST_LEGACY_SDK02_PYTHON   the 0.2.16 venv's python
#              A2A_TEST_LEGACY_JS_SDK_DIR     the dir whose node_modules holds @a2a-js/sdk
#   stop     nothing to stop
#
# By hand (from the repo root; about a minute the first time, instant when cached):
#   bash .ci/services/15-legacy-clients.sh install
#   eval "$(bash .ci/services/15-legacy-clients.sh start)"
#   .venv/bin/pytest tests/interop
set -euo pipefail

SDK03_VERSION=0.3.22
SDK02_VERSION=0.2.16
JS_SDK_VERSION=0.3.1
HTTPX_SSE_VERSION=0.4.3

: "${A2A_CI_CACHE:=$HOME/.cache/a2a-gateway-ci}"

SDK03_VENV="$A2A_CI_CACHE/legacy-a2a-sdk-$SDK03_VERSION-httpx-sse-$HTTPX_SSE_VERSION"
SDK02_VENV="$A2A_CI_CACHE/legacy-a2a-sdk-$SDK02_VERSION-httpx-sse-$HTTPX_SSE_VERSION"
JS_DIR="$A2A_CI_CACHE/legacy-a2a-js-sdk-$JS_SDK_VERSION"

log() { echo "[15-legacy-clients] $*" >&2; }

# python_venv DIR REQUIREMENT...: a venv at DIR with REQUIREMENT installed (kept when cached).
python_venv() {
  local dir=$1
  shift
  if [ -f "$dir/.installed" ] && "$dir/bin/python" -c 'import a2a.client' 2>/dev/null; then
    log "$* cached"
    return
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@" >&2
  touch "$dir/.installed"
  log "$* installed"
}

js_sdk() {
  if [ -f "$JS_DIR/.installed" ] && [ -f "$JS_DIR/node_modules/@a2a-js/sdk/package.json" ]; then
    log "@a2a-js/sdk $JS_SDK_VERSION cached"
    return
  fi
  command -v node >/dev/null || { log "node is not on PATH (node 20 or later)"; exit 1; }
  rm -rf "$JS_DIR"
  mkdir -p "$JS_DIR"
  echo '{"private": true, "type": "module"}' >"$JS_DIR/package.json"
  (cd "$JS_DIR" && npm install --silent --no-audit --no-fund --save-exact "@a2a-js/sdk@$JS_SDK_VERSION" >&2)
  touch "$JS_DIR/.installed"
  log "@a2a-js/sdk $JS_SDK_VERSION installed"
}

do_install() {
  mkdir -p "$A2A_CI_CACHE"
  python_venv "$SDK03_VENV" "a2a-sdk==$SDK03_VERSION" "httpx-sse==$HTTPX_SSE_VERSION"
  python_venv "$SDK02_VENV" "a2a-sdk==$SDK02_VERSION" "httpx-sse==$HTTPX_SSE_VERSION"
  js_sdk
}

do_start() {
  local missing=0
  [ -f "$SDK03_VENV/.installed" ] || missing=1
  [ -f "$SDK02_VENV/.installed" ] || missing=1
  [ -f "$JS_DIR/.installed" ] || missing=1
  if [ "$missing" -ne 0 ]; then
    log "not installed: run '$0 install' first"
    exit 1
  fi
  echo "export A2A_TEST_LEGACY_SDK03_PYTHON=$SDK03_VENV/bin/python"
  echo "export A2A_TEST_LEGACY_SDK02_PYTHON=$SDK02_VENV/bin/python"
  echo "export A2A_TEST_LEGACY_JS_SDK_DIR=$JS_DIR"
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  stop) ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
