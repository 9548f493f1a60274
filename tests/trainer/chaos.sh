#!/bin/sh
# tests/trainer/chaos.sh — training that restarts itself (issue 30): tempo-run --restart 3 relaunches
# tempo-train --resume auto each time a rank dies, and the run still ends where an uninterrupted
# one does.
#   1. the reference: the same command line, uninterrupted, 4 ranks (DP=4), 80 steps, a checkpoint
#      every 5 steps;
#   2-6. the same under tempo-run --restart 3 while a killer started here SIGKILLs a random rank
#      of the current attempt three times at random moments (a random number of steps into the
#      attempt, then a random few milliseconds; the second kill waits for a checkpoint of its
#      attempt first; the first may land before the run's step-0 checkpoint, a resume from
#      nothing): the run exits 0, tempo-run printed three restart lines and each names a rank
#      this script killed, by pid, dying of signal 9 (so the test cannot pass without the kills),
#      an attempt resumed from a checkpoint after step 0, and the final checkpoint's files
#      (parameters, AdamW moments, data position) and loss.csv's losses are bitwise the
#      reference's;
#   7-9. the same with --min-ranks 2 --rank-multiple 2: the first restart drops the killed rank and
#      rounds down to 2 ranks, tempo-run and tempo-train both say so, every later attempt resumes
#      on 2 ranks keeping the global batch of 8 (--batch 2 x 2 ranks x --accum 2, resharded from
#      DP=4), each of the 80 steps is in loss.csv once, and the losses equal the reference's
#      within 1e-4 (another reduction order: not bitwise; all 80 steps at 2 ranks differ by at
#      most 2.4e-6, measured, the shrink after step 5 by 1.7e-6).
# The killer signals only pids it read from /proc/<tempo-run pid>/task/*/children (the ranks that
# tempo-run forked for this test), each checked to be that attempt's tempo-train (its
# TEMPO_RESTART) right before the kill. It waits by polling the log (20 ms), never by a sleep
# standing in for an event; the random moments come from CHAOS_SEED (default: the clock), printed
# on the line after the plan, so that a failure replays. Every launch runs under `timeout`
# (CHAOS_TIMEOUT, default 300 s) and TEMPO_TIMEOUT=10s; no point asserts a duration.
# Knobs: CHAOS_SEED, CHAOS_KEEP=1 keeps the temporary directory, CHAOS_TIMEOUT.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare CHAOS README.md include/tempo.h
TEMPO_TIMEOUT=10s
export TEMPO_TIMEOUT
seed=${CHAOS_SEED:-$(date +%s)}
limit=""
command -v timeout >/dev/null 2>&1 && limit="timeout $guard"

MODEL="--data $tmp/corpus.txt --layers 2 --heads 2 --channels 96 --context 64 --val-every 0 \
--sample 0 --warmup 3 --steps 80 --ckpt-every 5 --resume auto --batch 2 --zero 1"
LAST=step_00000080
TOL=1e-4

echo "1..9"
echo "# CHAOS_SEED=$seed (the random moments of the kills: set it to replay them)"

# rnd N: a random number from 0 to N-1 (the seed and a counter: each call draws anew). Callers
# run it in $(...), a subshell, so the counter lives in a file: a shell variable would be counted
# up in the subshell only, and every draw would repeat the first (every kill hit the same rank).
echo 0 >"$tmp/draws"
rnd() {
    _k=$(($(cat "$tmp/draws") + 1))
    echo "$_k" >"$tmp/draws"
    # the k-th number of the seed's sequence (the first numbers of nearby seeds are alike)
    awk -v s="$seed" -v k="$_k" -v n="$1" \
        'BEGIN {srand(s); for (i = 0; i < k; i++) r = rand(); print int(r * n)}'
}
# children PID: PID's child processes
children() { echo $(cat /proc/"$1"/task/*/children 2>/dev/null); }
# attempt_ranks PID A: the pids of the children of tempo-run (PID, or its child when PID is the
# `timeout` that runs it) that run tempo-train with TEMPO_RESTART=A (the forked and exec'ed ranks
# of attempt A), one per line
attempt_ranks() {
    _tr=$1
    [ "$(cat /proc/"$1"/comm 2>/dev/null)" = tempo-run ] || _tr=$(children "$1")
    for _p in $(children "$_tr"); do
        [ "$(cat /proc/"$_p"/comm 2>/dev/null)" = tempo-train ] || continue
        _a=$(tr '\0' '\n' </proc/"$_p"/environ 2>/dev/null | sed -n 's/^TEMPO_RESTART=//p')
        [ "$_a" = "$2" ] && echo "$_p"
    done
}
# poll CONDITION...: until the command succeeds (0) or tempo-run $job is gone or 60 s pass (1)
poll() {
    _i=0
    until "$@"; do
        kill -0 "$job" 2>/dev/null || return 1
        _i=$((_i + 1))
        [ $_i -le 3000 ] || return 1
        sleep 0.02
    done
}
# after_mark PATTERN COUNT: the log has at least COUNT lines matching PATTERN after line $mark
after_mark() { [ "$(tail -n +"$((mark + 1))" "$log" | grep -c -- "$1")" -ge "$2" ]; }
have_ranks() { [ -n "$(attempt_ranks "$job" "$attempt")" ]; }

# chaos OUT MINSTEP [TEMPO-RUN OPTIONS...]: tempo-run --restart 3 OPTIONS -n 4 tempo-train $MODEL
# --out OUT in the background, log OUT.log; kills one rank of each of attempts 0, 1 and 2, the
# first after 0 to 7 steps of it (at least MINSTEP), the second after a checkpoint of its attempt
# and 0 to 3 steps more, the third after 1 to 8 steps; the kills in OUT.kills ("attempt A rank R
# pid P"), their troubles in OUT.why; sets rc to tempo-run's exit status.
chaos() {
    _out=$1 _min=$2
    shift 2
    log=$_out.log
    : >"$_out.kills"
    : >"$_out.why"
    # shellcheck disable=SC2086 # $limit and $MODEL are word lists
    $limit "$TR" --restart 3 "$@" -n 4 "$TT" $MODEL --out "$_out" >"$log" 2>&1 </dev/null &
    job=$!
    _cmd_="exit status of: tempo-run --restart 3 $* -n 4 tempo-train $MODEL --out $_out"
    eval "_cmd_$(printf '%s' "$log" | cksum | cut -d' ' -f1)=\"\$_cmd_\""
    for attempt in 0 1 2; do
        if ! poll have_ranks; then
            echo "attempt $attempt: no ranks of it seen" >>"$_out.why"
            break
        fi
        mark=$(wc -l <"$log")
        case $attempt in
        0) _steps=$(rnd 8)
           [ "$_steps" -ge "$_min" ] || _steps=$_min ;;
        1) poll after_mark "checkpoint: " 1 || echo "attempt 1: no checkpoint" >>"$_out.why"
           mark=$(wc -l <"$log")
           _steps=$(rnd 4) ;;
        *) _steps=$(($(rnd 8) + 1)) ;;
        esac
        [ "$_steps" = 0 ] || poll after_mark "] step " "$_steps" ||
            echo "attempt $attempt: ended before step $_steps of it" >>"$_out.why"
        sleep "0.0$(rnd 4)"
        set -- $(attempt_ranks "$job" "$attempt")
        if [ $# = 0 ]; then
            echo "attempt $attempt: its ranks were gone before the kill" >>"$_out.why"
            break
        fi
        shift "$(rnd $#)"
        _r=$(tr '\0' '\n' </proc/"$1"/environ | sed -n 's/^TEMPO_RANK=//p')
        kill -KILL "$1" && echo "attempt $attempt rank $_r pid $1" >>"$_out.kills"
        poll after_mark "^tempo-run: restart $((attempt + 1)) of 3" 1 ||
            echo "attempt $attempt: no restart line after the kill" >>"$_out.why"
    done
    wait "$job"
    rc=$?
    sed 's/^/# killed: /' "$_out.kills"
    grep "^tempo-run: restart" "$log" | cut -c 1-200 | sed 's/^/# /'
}

# named OUT: three restart lines, each naming a kill of OUT.kills (the rank, its pid, signal 9)
named() {
    [ ! -s "$1.why" ] && [ "$(wc -l <"$1.kills")" = 3 ] &&
        [ "$(grep -c "^tempo-run: restart [1-3] of 3" "$1.log")" = 3 ] || return 1
    while read -r _ _a _ _r _ _p; do
        grep -q "^tempo-run: restart $((_a + 1)) of 3.*[:;] rank $_r (pid $_p) was killed by signal 9" \
            "$1.log" || return 1
    done <"$1.kills"
}
# rows OUT: loss.csv's training steps are 1 to 80, each once
rows() { [ "$(step_list "$1/loss.csv")" = "$(seq 1 80 | tr '\n' ' ')" ]; }

launch 4 "$tmp/ref.log" --out "$tmp/ref"
point $? "reference: 80 uninterrupted steps on 4 ranks" "$tmp/ref.log"
losses "$tmp/ref" >"$tmp/ref.l"

t0=$(date +%s)
chaos "$tmp/c" 0
point "$rc" "DP=4 under --restart 3, a random rank killed 3 times: exits 0 ($(($(date +%s) - t0)) s)" \
    "$tmp/c.log"
named "$tmp/c"
point $? "3 restart lines, each naming a rank this test killed (pid, signal 9)" "$tmp/c.log"
cat "$tmp/c.why" | sed 's/^/# /'
grep -q -E "resumed from .*: step [1-9]" "$tmp/c.log"
point $? "an attempt resumed from a checkpoint after step 0" "$tmp/c.log"
grep "resumed from" "$tmp/c.log" | cut -c 1-160 | sed 's/^/# /'
_why=""
[ "$(ls "$tmp/ref/ckpt/$LAST")" = "$(ls "$tmp/c/ckpt/$LAST" 2>/dev/null)" ] || _why="other files"
for _f in $(ls "$tmp/ref/ckpt/$LAST"); do
    cmp "$tmp/ref/ckpt/$LAST/$_f" "$tmp/c/ckpt/$LAST/$_f" >/dev/null 2>&1 || _why="$_why $_f"
done
[ -z "$_why" ]
point $? "the final checkpoint ($(ls "$tmp/ref/ckpt/$LAST" | tr '\n' ' ')) is bitwise the \
reference's${_why:+: differs in$_why}" "$tmp/c.log"
losses "$tmp/c" >"$tmp/c.l"
rows "$tmp/c" && cmp -s "$tmp/ref.l" "$tmp/c.l"
point $? "loss.csv: steps 1-80 once each, the losses bitwise the reference's" "$tmp/c.log"

t0=$(date +%s)
chaos "$tmp/m" 1 --min-ranks 2 --rank-multiple 2
named "$tmp/m"
_named=$?
[ "$rc" = 0 ] && [ $_named = 0 ]
point $? "--min-ranks 2 --rank-multiple 2, killed 3 times: exits 0 after 3 restarts \
($(($(date +%s) - t0)) s)" "$tmp/m.log"
cat "$tmp/m.why" | sed 's/^/# /'
grep -q "^tempo-run: restart 1 of 3 on 2 ranks (was 4): rank" "$tmp/m.log" &&
    [ "$(grep -c "auto: restart [1-3] (TEMPO_RESTART) on 2 ranks: resuming" "$tmp/m.log")" = 3 ] &&
    grep -q "resume: keeping the checkpoint's global batch of 8 .* at 2 ranks" "$tmp/m.log" &&
    grep -q "^\[0\] steps .*-80 ran here" "$tmp/m.log" && ! grep -q '^\[[2-3]\] .*steps' "$tmp/m.log"
point $? "on 2 ranks after the first restart: tempo-run and each resumed attempt say so" \
    "$tmp/m.log"
grep -E "auto: restart|global batch of 8" "$tmp/m.log" | cut -c 1-160 | sed 's/^/# /'
rows "$tmp/m" && agree "$tmp/ref" "$tmp/m" 80 $TOL
report $? "loss.csv: steps 1-80 once each, losses the reference's within $TOL" "$tmp/m.log"
