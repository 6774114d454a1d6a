# shellcheck shell=bash
# Stages of scripts/test: a line when each starts and when it ends, with its
# time, so that a slow run shows where the time goes; and a run that is
# stopped (Ctrl-C, SIGTERM from a CI timeout, the script failing) says which
# stage it was in. Sourced, never run.
#
#   stage_trap          once, before the first stage
#   stage NAME          starts NAME (ending the stage before, if any)
#   stage_done          ends the current stage
#   stage_run CMD...    runs CMD as the stage's work; its exit status
#
# stage_run runs CMD in the background, in a process group of its own, and
# waits for it: bash defers a trap until a foreground command ends, so a
# SIGTERM from a CI timeout during a 5-minute compile would otherwise be
# noticed after it. On SIGINT, SIGTERM or SIGHUP the script sends SIGTERM
# to that whole group (meson, ninja, compilers, tests and the daemons they
# started), then says where it stopped. CMD gets SIGINT's default back
# (bash ignores it in background commands): tests see what they would see
# in the foreground.

STAGE_NAME=
STAGE_T0=0
STAGE_CHILD=
STAGE_RUN_T0=$SECONDS

STAGE_CPU0=0
STAGE_HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)

# stage_cpu: sets STAGE_CPU to the CPU time (user + system, in clock ticks)
# of this script's children waited for so far, from /proc (no subshell,
# whose own count would start at zero). Beside the wall time it tells a
# slow stage from a busy machine.
stage_cpu() {
	local f
	STAGE_CPU=0
	if read -r -a f <"/proc/$$/stat" 2>/dev/null; then
		STAGE_CPU=$((f[15] + f[16]))
	fi
}

stage_done() {
	[[ -n $STAGE_NAME ]] || return 0
	stage_cpu
	printf '==> stage %s: done in %d s (CPU %d s; %d s so far)\n' "$STAGE_NAME" $((SECONDS - STAGE_T0)) \
		$(((STAGE_CPU - STAGE_CPU0) / STAGE_HZ)) $((SECONDS - STAGE_RUN_T0))
	STAGE_NAME=
}

stage() {
	stage_done
	STAGE_NAME=$1
	STAGE_T0=$SECONDS
	stage_cpu
	STAGE_CPU0=$STAGE_CPU
	printf '==> stage %s: started\n' "$STAGE_NAME"
}

stage_run() {
	(
		trap - INT QUIT
		exec setsid "$@"
	) &
	STAGE_CHILD=$!
	local rc=0
	wait "$STAGE_CHILD" || rc=$?
	STAGE_CHILD=
	return "$rc"
}

# On a signal: stop the stage's command and everything it started, and any
# background job, then exit 128+N; the EXIT trap says where.
stage_signal() {
	local sig=$1 n=$2
	trap - INT TERM HUP
	STAGE_SIGNAL=$sig
	if [[ -n $STAGE_CHILD ]]; then
		kill -TERM -- "-$STAGE_CHILD" 2>/dev/null || kill -TERM "$STAGE_CHILD" 2>/dev/null || true
	fi
	# And what the stage runs as plain background jobs (the fuzzers).
	local pids
	pids=$(jobs -p)
	if [[ -n $pids ]]; then
		# shellcheck disable=SC2086 # one pid a word
		kill -TERM $pids 2>/dev/null || true
	fi
	wait 2>/dev/null || true
	exit $((128 + n))
}

stage_exit() {
	local rc=$?
	[[ -n $STAGE_NAME ]] || return 0
	printf '==> stopped in stage %s after %d s (%s, exit %d; %d s since the start)\n' "$STAGE_NAME" \
		$((SECONDS - STAGE_T0)) "${STAGE_SIGNAL:-the script failed}" "$rc" $((SECONDS - STAGE_RUN_T0)) >&2
}

stage_trap() {
	STAGE_SIGNAL=
	trap stage_exit EXIT
	trap 'stage_signal SIGINT 2' INT
	trap 'stage_signal SIGTERM 15' TERM
	trap 'stage_signal SIGHUP 1' HUP
}
