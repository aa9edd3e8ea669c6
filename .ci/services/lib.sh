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
