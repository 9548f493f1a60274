#!/bin/sh
# tests/mr/tempo_run.sh — TAP tests of tempo-run, the local launcher, through real processes.
#
# Covers the rank environment, output prefixing, exit-status propagation, ending the job when a
# rank fails, signal forwarding, --timeout, --grace, exec failures and argument errors, and that
# programs joining their job with MPI (tempo-train --backend mpi, *_perf_mpi) refuse tempo-run. It does not
# test libtempo: the ranks are sh one-liners. POSIX sh, run by the automake harness with
# top_builddir exported, or by hand:
#     top_builddir=/path/to/build top_srcdir=/path/to/src sh tests/mr/tempo_run.sh
# Elapsed-time checks (fail above 30 s) are hang guards, not performance assertions. Where the
# script must wait for ranks to be running it polls for their "ready" lines with a deadline; ranks
# order themselves through a FIFO. No sleep stands in for synchronization.

TR="${top_builddir:-.}/tools/tempo-run"
if [ ! -x "$TR" ]; then
    echo "Bail out! $TR not found or not executable (build it first: make tools/tempo-run)"
    exit 1
fi
unset TEMPO_ROOT TEMPO_RANK TEMPO_SIZE TEMPO_LOCAL_RANK TEMPO_LOCAL_SIZE

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tempo_run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

echo 1..42
n=0

# run ARGS...: tempo-run with stdin from /dev/null; sets rc and elapsed (s), output in out/err.
run() {
    t0=$(date +%s)
    "$TR" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    elapsed=$(($(date +%s) - t0))
}

# check DESCRIPTION COMMAND...: one TAP line; on failure the last run's output as diagnostics.
check() {
    n=$((n + 1))
    desc=$1
    shift
    if "$@"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        echo "# exit status $rc, $elapsed s; stdout, then stderr:"
        head -n 20 "$tmp/out" | cut -c 1-200 | sed 's/^/#   /'
        head -n 20 "$tmp/err" | cut -c 1-200 | sed 's/^/#   /'
    fi
}

out_is() { printf '%s\n' "$@" >"$tmp/want" && cmp -s "$tmp/want" "$tmp/out"; }
sorted_out_is() { printf '%s\n' "$@" >"$tmp/want" && sort "$tmp/out" | cmp -s "$tmp/want" -; }
sorted_err_is() { printf '%s\n' "$@" >"$tmp/want" && sort "$tmp/err" | cmp -s "$tmp/want" -; }
err_has() { grep -q -E -- "$1" "$tmp/err"; }
rc_is() { [ "$rc" -eq "$1" ]; }
quick() { [ "$elapsed" -le 30 ]; }

# wait_ready COUNT: until COUNT "ready" lines are in out (ranks are running), at most 30 s.
wait_ready() {
    i=0
    while [ "$(grep -c ready "$tmp/out")" -lt "$1" ]; do
        i=$((i + 1))
        [ $i -gt 300 ] && return 1
        sleep 0.1
    done
}

# run_term ARGS...: tempo-run ARGS in the background with 2 ranks that print "ready"; once both
# have, SIGTERM to tempo-run; then as run. out is emptied first: the background job truncates it
# only once it runs, so wait_ready could count the previous test's "ready" lines and signal
# tempo-run before it started.
run_term() {
    : >"$tmp/out"
    t0=$(date +%s)
    "$TR" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null &
    pid=$!
    wait_ready 2 && kill -TERM $pid
    wait $pid
    rc=$?
    elapsed=$(($(date +%s) - t0))
}

# ---------------------------------------------------------------------------- options
run --version
check "--version prints the package version" \
    eval 'rc_is 0 && grep -q -E "^tempo-run \(tempo\) [0-9]+\.[0-9]+\.[0-9]+$" "$tmp/out"'

help_lists_all() {
    for w in " -n," "-x NAME=VALUE" --no-prefix --timeout --grace --restart --min-ranks \
        --rank-multiple TEMPO_RESTART --help --version \
        "Exit status" " 124 " " 125 " " 126 " " 127 "; do
        grep -q -F -- "$w" "$tmp/out" || return 1
    done
}
run --help
check "--help lists every option and the exit codes" eval 'rc_is 0 && help_lists_all'

run -n 0 true
check "-n 0 is a usage error (exit 2)" eval 'rc_is 2 && err_has "number of ranks" && err_has Usage'
run -n abc true
check "-n abc is a usage error (exit 2)" eval 'rc_is 2 && err_has "got .abc." && err_has Usage'
run -n 4097 true
check "-n 4097 is a usage error (exit 2)" eval 'rc_is 2 && err_has "1 to 4096"'
run true
check "missing -n is a usage error (exit 2)" eval 'rc_is 2 && err_has "missing -n"'
run -n 2 -x FOO true
check "-x without =VALUE is rejected (exit 2)" eval 'rc_is 2 && err_has "NAME=VALUE"'
run -n 2 -x TEMPO_RANK=7 true
check "-x TEMPO_RANK=... is rejected (exit 2)" eval 'rc_is 2 && err_has "sets TEMPO_RANK itself"'
run -n 2 --timeout 0 true
check "--timeout 0 is rejected (exit 2)" eval 'rc_is 2 && err_has "--timeout"'

# ---------------------------------------------------------------------------- environment, output
run -n 3 sh -c 'echo "out $TEMPO_RANK"; echo "err $TEMPO_RANK" >&2'
check "stdout lines of 3 ranks are prefixed" \
    eval 'rc_is 0 && sorted_out_is "[0] out 0" "[1] out 1" "[2] out 2"'
check "stderr lines of 3 ranks are prefixed" \
    eval 'sorted_err_is "[0] err 0" "[1] err 1" "[2] err 2"'

# Each line "[r] r 3 r 3 127.0.0.1:PORT", the same PORT on every line.
env_ok() {
    [ "$(wc -l <"$tmp/out")" -eq 3 ] && awk '
        { r = substr($1, 2, length($1) - 2) }
        r != $2 || $3 != 3 || $4 != r || $5 != 3 { bad = 1 }
        $6 !~ /^127\.0\.0\.1:[0-9]+$/ || (NR > 1 && $6 != root) { bad = 1 }
        { root = $6; port = substr($6, 11) + 0; if (port < 1 || port > 65535) bad = 1 }
        END { exit bad }' "$tmp/out"
}
run -n 3 sh -c 'echo "$TEMPO_RANK $TEMPO_SIZE $TEMPO_LOCAL_RANK $TEMPO_LOCAL_SIZE $TEMPO_ROOT"'
check "TEMPO_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE set, one TEMPO_ROOT=127.0.0.1:PORT for all" \
    eval 'rc_is 0 && env_ok'

TEMPO_ROOT=10.1.2.3:4567
export TEMPO_ROOT
run -n 2 sh -c 'echo "$TEMPO_ROOT"'
unset TEMPO_ROOT
check "a TEMPO_ROOT already set is kept" \
    eval 'rc_is 0 && sorted_out_is "[0] 10.1.2.3:4567" "[1] 10.1.2.3:4567"'

# The rendezvous port is held from before the first fork: rank 0 inherits tempo-run's socket,
# already listening on TEMPO_ROOT's port (/proc/net/tcp: state 0A), and no other rank gets it. A
# port released for rank 0 to bind could be taken first (make check -j16 saw "Address already in
# use").
if [ -r /proc/net/tcp ]; then
    # shellcheck disable=SC2016 # expanded by the ranks
    run -n 2 sh -c 'if [ "$TEMPO_RANK" != 0 ]; then echo "fd ${TEMPO_ROOT_FD:-none}"; exit 0; fi
        ino=$(readlink "/proc/$$/fd/${TEMPO_ROOT_FD:-x}" | sed -n "s/^socket:\[\(.*\)\]$/\1/p")
        port=$(printf %04X "${TEMPO_ROOT##*:}")
        awk -v ino="$ino" -v p="$port" '"'"'$10 == ino && $4 == "0A" && $2 ~ (":" p "$") {f = 1}
            END {exit !f}'"'"' /proc/net/tcp && echo "listening on TEMPO_ROOT"'
    check "rank 0 inherits a socket listening on TEMPO_ROOT's port (TEMPO_ROOT_FD); rank 1 not" \
        eval 'rc_is 0 && sorted_out_is "[0] listening on TEMPO_ROOT" "[1] fd none"'
else
    n=$((n + 1))
    echo "ok $n # SKIP /proc/net/tcp not readable"
fi

run -n 2 -x FOO=bar -x 'BAZ=a b=c' sh -c 'echo "$FOO/$BAZ"'
check "-x NAME=VALUE reaches every rank" eval 'rc_is 0 && sorted_out_is "[0] bar/a b=c" "[1] bar/a b=c"'

run -np 2 echo hi
check "PROGRAM is found in PATH; -np works like -n" eval 'rc_is 0 && sorted_out_is "[0] hi" "[1] hi"'

run -n 1 sh -c 'printf "no newline"'
check "a final partial line is flushed with a newline" eval 'rc_is 0 && out_is "[0] no newline"'

long_line_ok() {
    awk '
        NR == 1 && ($0 !~ /^\[0\] a+$/ || length($0) != 4 + 65536) { bad = 1 }
        NR == 2 && ($0 !~ /^\[0\] a+$/ || length($0) != 4 + 4464) { bad = 1 }
        END { exit bad || NR != 2 }' "$tmp/out"
}
run -n 1 sh -c 'head -c 70000 /dev/zero | tr "\0" a; echo'
check "a 70000-byte line comes out as 65536 + 4464 bytes, each piece prefixed" \
    eval 'rc_is 0 && long_line_ok'

# 600 lines "[r] r:xxx...", prefix and content from the same rank.
no_interleaving() {
    awk '
        $0 !~ /^\[[0-2]\] [0-2]:x+$/ || length($0) != 4 + 2 + 5000 { bad = 1 }
        substr($0, 2, 1) != substr($0, 5, 1) { bad = 1 }
        END { exit bad || NR != 600 }' "$tmp/out"
}
run -n 3 sh -c 'x=$(head -c 5000 /dev/zero | tr "\0" x); i=0
    while [ $i -lt 200 ]; do echo "$TEMPO_RANK:$x"; i=$((i + 1)); done'
check "5000-byte lines of 3 busy ranks never interleave" eval 'rc_is 0 && no_interleaving'

run -n 2 --no-prefix sh -c 'echo "plain $TEMPO_RANK"'
check "--no-prefix: the ranks' lines come out without prefix" \
    eval 'rc_is 0 && sorted_out_is "plain 0" "plain 1"'
run -n 1 --no-prefix sh -c 'echo plain; printf tail'
check "--no-prefix passes bytes unchanged (no newline added at the end)" \
    eval 'rc_is 0 && printf "plain\ntail" | cmp -s - "$tmp/out"'

t0=$(date +%s)
printf 'hello\n' | "$TR" -n 2 sh -c 'read -r x; echo "got:$x"' >"$tmp/out" 2>"$tmp/err"
rc=$?
elapsed=$(($(date +%s) - t0))
check "rank 0 reads stdin, the others read /dev/null" \
    eval 'rc_is 0 && sorted_out_is "[0] got:hello" "[1] got:"'

# rank 0's TEMPO_ROOT_FD, the rendezvous socket, is the one exception (left out of its list)
no_extra_fds() {
    _rfd=$(sed -n 's/^\[0\] root //p' "$tmp/out")
    grep -v -x -e "\[0\] $_rfd" -e '\[.\] root .*' "$tmp/out" | sort >"$tmp/fds"
    printf '%s\n' "[0] 0" "[0] 1" "[0] 2" "[1] 0" "[1] 1" "[1] 2" | cmp -s - "$tmp/fds"
}
run -n 2 sh -c 'ls /proc/$$/fd; echo "root ${TEMPO_ROOT_FD:-none}"' 3</dev/null 9</dev/null
check "ranks inherit no descriptors beyond 0, 1 and 2 (and rank 0 TEMPO_ROOT_FD)" \
    eval 'rc_is 0 && no_extra_fds'

# ---------------------------------------------------------------------------- failures
run -n 3 sh -c 'if [ "$TEMPO_RANK" = 1 ]; then exit 3; fi'
check "a rank exiting 3 makes tempo-run exit 3 and name it" \
    eval 'rc_is 3 && err_has "^tempo-run: rank 1 \(pid [0-9]+\) exited with status 3$"'

# Rank 0 is always forked before rank 1, so it is there to be ended; rank 2 may not be started.
run -n 3 sh -c 'if [ "$TEMPO_RANK" = 1 ]; then kill -9 $$; fi; exec sleep 600'
check "a rank killed by SIGKILL gives 137 and a message naming rank and signal" \
    eval 'rc_is 137 &&
        err_has "^tempo-run: rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\)$"'
check "its sibling sleeping 600 s is ended promptly" \
    eval 'quick && err_has "^tempo-run: ended ranks? 0(,2)?$"'

# Rank 0 ignores SIGTERM; rank 1 fails only once rank 0 has set that up (the FIFO orders them).
mkfifo "$tmp/fifo"
run -n 2 --grace 1 sh -c 'if [ "$TEMPO_RANK" = 0 ]; then trap "" TERM; echo >"$1"; exec sleep 600
    fi; read -r x <"$1"; exit 5' sh "$tmp/fifo"
check "a rank ignoring SIGTERM is killed after --grace; the failure's status (5) is kept" \
    eval 'rc_is 5 && quick && err_has "rank 0 still running 1 s after SIGTERM; sending SIGKILL" &&
        err_has "^tempo-run: ended rank 0$"'

run -n 2 --timeout 1 sh -c 'exec sleep 600'
check "--timeout ends the job with 124 and names the ranks still running" \
    eval 'rc_is 124 && quick && err_has "^tempo-run: timed out after 1 s; ranks 0,1 still running$"'

run -n 1 --timeout 1 --grace 1 sh -c 'trap "" TERM; exec sleep 600'
check "--timeout: a rank ignoring SIGTERM is killed after --grace; the status stays 124" \
    eval 'rc_is 124 && quick && err_has "^tempo-run: rank 0 still running 1 s after SIGTERM; sending SIGKILL$"'

run -n 2 tempo-run-no-such-program
check "a program that is not found gives 127 and says so" \
    eval 'rc_is 127 && quick &&
        err_has "^tempo-run: cannot run .tempo-run-no-such-program.: No such file or directory$"'

printf 'echo hi\n' >"$tmp/noexec"
chmod 644 "$tmp/noexec"
run -n 2 "$tmp/noexec"
check "a program that is not executable gives 126" \
    eval 'rc_is 126 && err_has "cannot run .*: Permission denied$"'

# ---------------------------------------------------------------------------- signals
run_term -n 2 sh -c 'trap "echo caught TERM; kill \$p; exit 0" TERM
    sleep 600 & p=$!; echo ready; wait $p'
check "SIGTERM to tempo-run is forwarded to every rank" \
    eval 'rc_is 0 && quick && grep -q -F "[0] caught TERM" "$tmp/out" &&
        grep -q -F "[1] caught TERM" "$tmp/out" &&
        err_has "^tempo-run: forwarding signal 15 \(Terminated\) to ranks 0,1$"'

run_term -n 2 sh -c 'echo ready; exec sleep 600'
check "ranks that die of a forwarded SIGTERM give 143 and are reported as ended" \
    eval 'rc_is 143 && quick && err_has "^tempo-run: ended ranks 0,1$" && ! err_has "killed by"'

# Both ranks ignore SIGTERM (set before their "ready"), so no rank fails and nothing but the grace
# after the forwarded signal ends them. --timeout 20 is the hang guard: without that grace,
# tempo-run waits for the ranks until the timeout ends the job (124).
run_term -n 2 --grace 1 --timeout 20 sh -c 'trap "" TERM; echo ready; exec sleep 600'
check "ranks ignoring a forwarded SIGTERM are killed after --grace and named; 143, tempo-run returns" \
    eval 'rc_is 143 && quick &&
        err_has "^tempo-run: ranks 0,1 still running 1 s after SIGTERM; sending SIGKILL$" &&
        err_has "^tempo-run: ended ranks 0,1$" && ! err_has "killed by"'

# ---------------------------------------------------------------------------- restarts
# Rank 1 fails (status 3) on attempts 0 and 1; every rank prints "r ATTEMPT RANK SIZE ROOT KEY"
# first (rank 0 may be ended before it prints, rank 1 never is). Rank 1's three lines: attempts 0,
# 1, 2 in order, each with a TEMPO_ROOT and a key of its own (none: a build without libcrypto);
# the last attempt's rank 0 printed too.
restarted_ok() {
    grep "^\[1\] r " "$tmp/out" | awk '
        $3 != NR - 1 || $4 != 1 || $5 != 2 { bad = 1 }
        { if ($6 in roots || ($7 != "none" && $7 in keys)) bad = 1; roots[$6] = 1; keys[$7] = 1 }
        END { exit bad || NR != 3 }' && grep -q "^\[0\] r 2 0 2 " "$tmp/out" &&
        [ "$(grep -c "^tempo-run: restart" "$tmp/err")" -eq 2 ] &&
        err_has "^tempo-run: restart 1 of 2: rank 1 \(pid [0-9]+\) exited with status 3 at [0-9.]+ s; relaunching 2 ranks$" &&
        err_has "^tempo-run: restart 2 of 2: rank 1 "
}
run -n 2 --restart 2 sh -c 'echo "r $TEMPO_RESTART $TEMPO_RANK $TEMPO_SIZE $TEMPO_ROOT ${TEMPO_AUTH_KEY:-none}"
    [ "$TEMPO_RANK" = 1 ] && [ "$TEMPO_RESTART" -lt 2 ] && exit 3; exit 0'
check "--restart 2, a rank failing twice: relaunched with TEMPO_RESTART 1, 2, a new root and key each time; 0" \
    eval 'rc_is 0 && restarted_ok'

run -n 2 --restart 3 sh -c '[ "$TEMPO_RANK" = 1 ] && exit 2; exec sleep 600'
check "--restart 3: a rank exiting with status 2 (a usage error) is not restarted; 2" \
    eval 'rc_is 2 && quick && ! err_has "restart 1" &&
        err_has "^tempo-run: not restarting: a rank exited with status 2"'

run -n 2 --restart 1 sh -c '[ "$TEMPO_RANK" = 0 ] && exit $((10 + TEMPO_RESTART)); exec sleep 600'
check "--restart 1, every attempt failing: the last attempt's status (11), no restart left" \
    eval 'rc_is 11 && quick && err_has "^tempo-run: restart 1 of 1: rank 0 .* status 10 at" &&
        err_has "^tempo-run: no restart left \(--restart 1\): exit status 11$"'

# -n 5: the last rank fails on attempts 0 and 1; 5 - 1 = 4 ranks, then 4 - 1 = 3, rounded down to 2
run -n 5 --restart 3 --min-ranks 2 --rank-multiple 2 sh -c 'echo "s $TEMPO_RESTART $TEMPO_SIZE"
    [ "$TEMPO_RESTART" -lt 2 ] && [ "$TEMPO_RANK" = $((TEMPO_SIZE - 1)) ] && exit 3; exit 0'
check "--min-ranks 2 --rank-multiple 2 -n 5: relaunched without the failed ranks on 4, then 2 ranks" \
    eval 'rc_is 0 && err_has "^tempo-run: restart 1 of 3 on 4 ranks \(was 5\): rank 4 .*, without failed rank 4$" &&
        err_has "^tempo-run: restart 2 of 3 on 2 ranks \(was 4\): rank 3 .*, without failed rank 3$" &&
        [ "$(grep -c " s 2 2$" "$tmp/out")" -eq 2 ] && ! grep -q " s 2 [^2]" "$tmp/out"'

run_term -n 2 --restart 3 sh -c 'echo ready; exec sleep 600'
check "--restart 3 and a SIGTERM to tempo-run: the interrupted job is not restarted; 143" \
    eval 'rc_is 143 && quick && ! err_has "restart 1" &&
        err_has "^tempo-run: not restarting: the job was interrupted$"'

usage_restart() {
    run -n 2 --min-ranks 1 true
    rc_is 2 && err_has "pass --restart N too" || return 1
    run -n 4 --restart 1 --min-ranks 3 --rank-multiple 2 true
    rc_is 2 && err_has "multiple of --rank-multiple 2" || return 1
    run -n 2 -x TEMPO_RESTART=1 true
    rc_is 2 && err_has "sets TEMPO_RESTART itself"
}
check "--min-ranks without --restart, not a multiple of --rank-multiple, -x TEMPO_RESTART: exit 2" \
    usage_restart

# Programs that join their job with MPI, started by tempo-run instead of mpirun, would each be a
# job of one rank (independent copies writing the same files): they refuse and say to use mpirun.
TT="${top_builddir:-.}/trainer/tempo-train"
PM="${top_builddir:-.}/perf/all_reduce_perf_mpi"
if "$TT" --help 2>/dev/null | grep -q "this build has: .*mpi"; then
    run -n 2 --timeout 60 "$TT" --backend mpi --steps 1 --out "$tmp/mpi-train"
    check "tempo-run -n 2 tempo-train --backend mpi refuses, saying to launch it with mpirun" \
        eval '! rc_is 0 && err_has "one of 2 ranks, but MPI made this process a job of its own" &&
            err_has "mpirun -n 2" && [ ! -e "$tmp/mpi-train/loss.csv" ]'
else
    n=$((n + 1))
    echo "ok $n - tempo-train --backend mpi under tempo-run # SKIP no mpi backend in this build"
fi
if [ -x "$PM" ]; then
    run -n 2 --timeout 60 "$PM" -b 8 -e 8
    check "tempo-run -n 2 all_reduce_perf_mpi refuses, saying to launch it with mpirun" \
        eval '! rc_is 0 && err_has "MPI baseline: started by tempo-run as one of 2 ranks" &&
            ! grep -q "Avg bus bandwidth" "$tmp/out"'
else
    n=$((n + 1))
    echo "ok $n - all_reduce_perf_mpi under tempo-run # SKIP not built (no MPI)"
fi

[ "$n" -eq 42 ] || echo "Bail out! ran $n tests, planned 42"
