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
#   shm n=4 defaults  default chunk size and credit, progress thread off (TEMPO_PROGRESS_THREAD=0)
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
echo "1..$((nl + ngroups))"

num=0
printf '%s\n' "$launches" | while read -r label n mode groups envs; do
    [ -n "$label" ] || continue
    dir="$tmp/$label"
    mkdir "$dir" || exit 1
    printf '%s\n' "$groups" | tr ',' '\n' | sed 's|^|sched/|' >"$dir/groups"
    mr_launch "$label" "$n" "$dir" "$envs TEMPO_SCHED_LOG=$dir/log.%r" "$PROG" --mode "$mode"
done
