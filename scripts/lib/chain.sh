# Shared by scripts/soak, scripts/stall-memory and scripts/chaos-chain (sourced, not run):
# brokers of a chain on loopback. The script sets, before calling these: `broker` (the
# binary), `work` (a directory for data and logs), `base` (the port before B1's),
# optionally `broker_flags` (an array of extra flags for every broker), and `pids` (an
# array: what it started, in order).

# port I: broker B<I>'s port.
port() { echo $((base + $1)); }

# start I [NEIGHBOUR_I]: starts broker B<I>, dialling B<NEIGHBOUR_I> if given, logging to
# $work/b<I>.log; prints its pid.
start() {
    local i="$1" args=()
    if [ $# -gt 1 ]; then args=(--neighbour "quic://127.0.0.1:$(port "$2")"); fi
    if declare -p broker_flags >/dev/null 2>&1; then args+=("${broker_flags[@]}"); fi
    "$broker" --name "B$i" --listen "127.0.0.1:$(port "$i")" --data-dir "$work/b$i" \
        "${args[@]}" >>"$work/b$i.log" 2>&1 &
    echo $!
}

# wait_for_links N: until the brokers' logs show N links up (each link is logged at both
# ends), or 10 s.
wait_for_links() {
    for _ in $(seq 1 100); do
        if [ "$(cat "$work"/b*.log | grep -c "neighbour link up" || true)" -ge "$1" ]; then return; fi
        sleep 0.1
    done
}

# rss PID: the process's resident memory in kB (0 if it is gone).
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# stop_started: stops what the script started (`pids`), the last started first, so that
# clients go before their brokers (a client whose broker went first reports the lost
# connection as a failure); a stopped (SIGSTOP) process is continued so that it can end.
stop_started() {
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -CONT "${pids[i]}" 2>/dev/null || true
        kill "${pids[i]}" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}

# exit_on_signals: INT and TERM end the script at once through its EXIT trap; bash would
# otherwise run that trap only after the command in the foreground, and leave the brokers
# running if the script was killed. Long commands run in the background and are waited for.
exit_on_signals() {
    trap 'exit 130' INT
    trap 'exit 143' TERM
}
