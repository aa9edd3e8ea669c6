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
