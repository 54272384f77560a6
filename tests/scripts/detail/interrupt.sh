# Sourced by the tests that kill a cache step half-way (the *_interrupted and *_heal tests): one way
# to do what a CI job stopped at its time limit, or by Ctrl-C, leaves behind.
#
# kill_when_held MARKER OUT ERR COMMAND...
#   Runs COMMAND in a session of its own (setsid, stdin /dev/null, stdout to OUT, stderr to ERR; the
#   same path for both keeps them in one file), waits until the file MARKER exists (a stand-in writes
#   it at the point the test picked), then SIGKILLs the whole process group, as a killed job's would
#   be, and waits until none of its processes is left (a zombie waiting for init writes nothing).
#   Sets KILLED_PGID to the group it killed. Returns 0 once killed; 1, with one line on stderr and the
#   group already gone, when COMMAND ended before MARKER or MARKER did not appear within
#   KILL_WHEN_HELD_LIMIT seconds (default 120: generous, for a loaded machine).
kill_when_held() {
  local marker="$1" out="$2" err="$3" job pgid_file i limit="${KILL_WHEN_HELD_LIMIT:-120}"
  shift 3
  pgid_file="$(mktemp)"
  KILLED_PGID=""
  # Started from a background job of a non-interactive shell, setsid does not fork: the bash that
  # writes its pid is the session's and the group's leader, and exec keeps that pid for COMMAND.
  if [ "$out" = "$err" ]; then
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pgid_file" "$@" >"$out" 2>&1 </dev/null &
  else
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pgid_file" "$@" >"$out" 2>"$err" </dev/null &
  fi
  job=$!
  for ((i = 0; i < limit * 20; i++)); do
    [ -e "$marker" ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  for ((i = 0; i < 100; i++)); do [ -s "$pgid_file" ] && break; sleep 0.05; done
  KILLED_PGID="$(cat "$pgid_file")"
  rm -f "$pgid_file"
  [ -n "$KILLED_PGID" ] && [ "$KILLED_PGID" -gt 1 ] && kill -9 -- "-$KILLED_PGID" 2>/dev/null
  wait "$job" 2>/dev/null || true  # (bash's "Killed" notice not shown)
  for ((i = 0; i < 200; i++)); do _kill_when_held_alive || break; sleep 0.05; done
  if _kill_when_held_alive; then
    echo "kill_when_held: processes of group $KILLED_PGID outlived SIGKILL" >&2
    return 1
  fi
  if [ ! -e "$marker" ]; then
    echo "kill_when_held: '$*' ended or ran ${limit} s without reaching its marker $marker" >&2
    return 1
  fi
  return 0
}

_kill_when_held_alive() {
  [ -n "$KILLED_PGID" ] &&
    ps -eo pgid=,stat= | awk -v g="$KILLED_PGID" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'
}
