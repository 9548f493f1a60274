#!/bin/sh
# tests/mr/sched.sh — scheduled requests (priorities, chunks, credit, the coordinator's order) on
# real ranks: launches tests/mr/sched_test through tempo-run under several settings and turns the
# ranks' result files into TAP, one point per launch and one per check group (results.awk).
#
# Launches (what each one checks is documented at the top of sched_test.c):
#   shm n=1..5, 8     64 KiB chunks, one chunk in flight (TEMPO_CREDIT_BYTES=1): many requests
#                     queue, so the order log shows many choices for the priority check
#   tcp n=2, 4        the same over TCP (TEMPO_HOST_ID=%r)
#   shm n=3 fifo      TEMPO_SCHED=fifo: the order log must follow readiness, not priorities
#   shm n=4 defaults  default chunk size and credit (auto), progress thread off
#                     (TEMPO_PROGRESS_THREAD=0)
#   auto2, autotcp4   TEMPO_CHUNK_BYTES=auto TEMPO_CREDIT_BYTES=auto over shm and TCP; with
#                     small2, tcp4 and nothread4 two more points: every rank of the auto launches
#                     wrote the same "# results" hash as every rank of the fixed-size launches of
#                     the same rank count (64 KiB chunks, one in flight): bitwise the same results
#   chunks n=6, tcp5  a reduce-scatter and an all-gather in 64-byte chunks (13565 chunks each),
#                     TEMPO_TIMEOUT=10: a rank that stops answering for 10 s fails them
#   missing n=3       a request one rank never posts: named in the error, with that rank
#   mismatch n=3      a request whose count differs across ranks: every rank fails at once
# Knobs: SCHED_TIMEOUT (hang guard per launch, 300 s), SCHED_KEEP=1 keeps the files.

TR="${top_builddir:-.}/tools/tempo-run"
PROG="${top_builddir:-.}/tests/mr/sched_test"
srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/mr/launch.sh"
mr_prepare SCHED "$PROG"

# label n mode groups env...
launches="
small1 1 normal results,mixed,order TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
small2 2 normal results,mixed,order TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
small3 3 normal results,mixed,order TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
small4 4 normal results,mixed,order TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
small5 5 normal results,mixed,order TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
small8 8 normal results,mixed,order TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
tcp2 2 normal results,mixed,order TEMPO_HOST_ID=%r TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
tcp4 4 normal results,mixed,order TEMPO_HOST_ID=%r TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
fifo3 3 normal results,mixed,order TEMPO_SCHED=fifo TEMPO_CHUNK_BYTES=64K TEMPO_CREDIT_BYTES=1
nothread4 4 normal results,mixed,order TEMPO_PROGRESS_THREAD=0
auto2 2 normal results,mixed,order TEMPO_CHUNK_BYTES=auto TEMPO_CREDIT_BYTES=auto
autotcp4 4 normal results,mixed,order TEMPO_HOST_ID=%r TEMPO_CHUNK_BYTES=auto TEMPO_CREDIT_BYTES=auto
chunks6 6 chunks chunks TEMPO_TIMEOUT=10
chunkstcp5 5 chunks chunks TEMPO_HOST_ID=%r TEMPO_TIMEOUT=10
missing3 3 missing missing TEMPO_TIMEOUT=3
mismatch3 3 mismatch mismatch
"

nl=$(printf '%s\n' "$launches" | grep -c .)
ngroups=0
for g in $(printf '%s\n' "$launches" | awk 'NF { print $4 }' | tr ',' ' '); do
    ngroups=$((ngroups + 1))
done
echo "1..$((nl + ngroups + 2))"

num=0
printf '%s\n' "$launches" | while read -r label n mode groups envs; do
    [ -n "$label" ] || continue
    dir="$tmp/$label"
    mkdir "$dir" || exit 1
    printf '%s\n' "$groups" | tr ',' '\n' | sed 's|^|sched/|' >"$dir/groups"
    mr_launch "$label" "$n" "$dir" "$envs TEMPO_SCHED_LOG=$dir/log.%r" "$PROG" --mode "$mode"
done

# same_results NUM DESC LABEL...: one point: rank by rank, every launch wrote the same "# results"
# hash (ranks differ: a reduce-scatter gives each rank its own block).
same_results() {
    _num=$1 _desc=$2
    shift 2
    _bad= _r=0 _count=0
    for _f in "$tmp/$1"/r[0-9]*; do
        _r=${_f##*/r}
        _h=$(for _l in "$@"; do sed -n 's/^# results //p' "$tmp/$_l/r$_r" 2>/dev/null; done)
        _count=$((_count + $(printf '%s\n' "$_h" | grep -c .)))
        [ "$(printf '%s\n' "$_h" | grep -c .)" -eq $# ] &&
            [ "$(printf '%s\n' "$_h" | sort -u | grep -c .)" -eq 1 ] || _bad="$_bad $_r"
    done
    if [ -z "$_bad" ] && [ "$_count" -ge 4 ]; then
        echo "ok $_num - $_desc: $# launches agree rank by rank ($_count hashes)"
    else
        echo "not ok $_num - $_desc: hashes differ or are missing at rank(s)${_bad:- (none found)}"
        for _l in "$@"; do
            echo "#   $_l: $(sed -n 's/^# results //p' "$tmp/$_l"/r[0-9]* 2>/dev/null | tr '\n' ' ')"
        done
    fi
}
same_results $((nl + ngroups + 1)) "n=2: auto chunk and credit give the fixed sizes' results" \
    small2 auto2
same_results $((nl + ngroups + 2)) "n=4: auto (shm, tcp) give the fixed sizes' results" \
    small4 tcp4 nothread4 autotcp4
