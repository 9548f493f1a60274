#!/bin/sh
# tests/mr/coll_run.sh TRANSPORT — the driver of coll_shm.sh and coll_tcp.sh (TRANSPORT is shm or
# tcp) and of the collective layer of tests/transport/conform.sh (any other name: every rank on
# this host, the transport chosen by COLL_ENV, e.g. COLL_ENV='TEMPO_TRANSPORTS=ucx,^shm', and
# COLL_EXPECT the text one of every rank's "transport NAME carries the data of N peers" log lines
# must contain, '@' standing for the number of peers): launches tests/mr/coll_test through
# tempo-run at each rank count 1..8 and turns the ranks' result files into TAP, one point per
# launch and one per (rank count, check group), the groups being each collective's automatic choice
# and each of its algorithms ("allreduce/ring"), barrier, send/recv rings, the many-requests-in-
# flight phase and the self-test of the reference.
#
# What runs inside one launch is documented at the top of coll_test.c. At the few-MB size the
# product is reduced at rank counts above COLL_FULL_BIG_MAX (default 4), to keep the pair of
# scripts within a few minutes on a 2-core machine:
#   reductions     every dtype with sum; every op with float32, with one 16-bit float type
#                  (float16 at odd rank counts, bfloat16 at even ones) and with one integer type
#                  rotating with the rank count (int8, uint8, int32, uint32, int64, uint64)
#   data movement  one dtype per element size: int8, bfloat16, float32, float64
#   in-place with sendbuf == recvbuf (reduce_scatter, allgather): float32 (sum) only
# Counts 0, 1 and 1037 always run the whole product, at every rank count.
#
# A group passes when every rank wrote the same number of checks for it and none failed. Checks
# the library refused with TEMPO_ERR_UNSUPPORTED (allreduce "shm" across hosts) are skipped; on
# shm, and on one rank, such a refusal is a failure: every algorithm can run on one host, and on
# one rank.
# A launch passes when tempo-run exits 0, every rank wrote its END line and, where the INIT log
# (TEMPO_DEBUG=INFO) has its "transport NAME carries the data of N peers" lines, used the intended
# transport. Results never come from the library's own reporting: the ranks check their data
# against a reference computed locally and write files, which this script reads.
#
# Knobs (environment): COLL_RANKS ("1 2 3 4 5 6 7 8"), COLL_FULL_BIG_MAX (4; 8 runs the whole
# product everywhere), COLL_BIG_BYTES (the "few MB" size, 3145728; 65536 and up: coll_test
# --big-bytes), COLL_ENV (NAME=VALUE words added to the ranks' environment), COLL_TIMEOUT (per
# launch, 600 s: the hang guard), COLL_KEEP=1 keeps the result files (path printed). Under
# ThreadSanitizer the MB size takes over 90 % of a launch; COLL_BIG_BYTES=262144 with
# COLL_ENV="TEMPO_SHM_COLL_BYTES=64K TEMPO_SHM_RING_BYTES=64K" still runs it through several
# staged segments and ring wraps, in a tenth of the time. Run by the automake harness with
# top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/mr/coll_shm.sh

transport=$1
case $transport in
shm | tcp) ;;
[a-z]*) [ -n "${COLL_ENV:-}" ] || {
    echo "Bail out! coll_run.sh $transport: COLL_ENV must select the transport"
    exit 1
} ;;
*)
    echo "Bail out! usage: coll_run.sh shm|tcp|NAME"
    exit 1
    ;;
esac

TR="${top_builddir:-.}/tools/tempo-run"
srcdir=${top_srcdir:-$(dirname "$0")/../..}
PROG="${top_builddir:-.}/tests/mr/coll_test"
for f in "$TR" "$PROG"; do
    if [ ! -x "$f" ]; then
        echo "Bail out! $f not found or not executable (build it first: make check)"
        exit 1
    fi
done

# Nothing from the caller's environment may change what is tested.
unset TEMPO_ROOT TEMPO_RANK TEMPO_SIZE TEMPO_LOCAL_RANK TEMPO_LOCAL_SIZE TEMPO_ALGO TEMPO_SHM \
    TEMPO_HOST_ID
if [ "$transport" = tcp ]; then
    TEMPO_HOST_ID=%r # every rank its own host: no shared memory, TCP between all pairs
    export TEMPO_HOST_ID
fi
# A lost message shows up as a timeout of the library's wait well before tempo-run's hang guard.
TEMPO_TIMEOUT=60
export TEMPO_TIMEOUT
# The INIT log says which transport carries which peers ("transport shm carries the data of 2
# peers: ranks 1-2"): the launch point checks it, so a tcp run that silently used shared memory
# (or the reverse) fails.
if [ -z "${TEMPO_DEBUG:-}" ]; then
    TEMPO_DEBUG=INFO
    TEMPO_DEBUG_SUBSYS=INIT
    export TEMPO_DEBUG TEMPO_DEBUG_SUBSYS
fi

ranks=${COLL_RANKS:-1 2 3 4 5 6 7 8}
full_big_max=${COLL_FULL_BIG_MAX:-4}
launch_timeout=${COLL_TIMEOUT:-600}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/coll_$transport.XXXXXX") || exit 1
if [ "${COLL_KEEP:-0}" = 1 ]; then
    trap 'echo "# results kept in $tmp"' EXIT
else
    trap 'rm -rf "$tmp"' EXIT
fi
trap 'exit 1' HUP INT TERM

if ! "$PROG" --list >"$tmp/groups" || [ ! -s "$tmp/groups" ]; then
    echo "Bail out! $PROG --list failed"
    exit 1
fi
ngroups=$(wc -l <"$tmp/groups")
nlaunch=0
for n in $ranks; do nlaunch=$((nlaunch + 1)); done
echo "1..$((nlaunch * (1 + ngroups)))"

strict=0
[ "$transport" = shm ] && strict=1

num=0
t_start=$(date +%s)
for n in $ranks; do
    dir="$tmp/n$n"
    mkdir "$dir" || exit 1
    big=
    [ "$n" -le "$full_big_max" ] && big=--full-big
    [ -n "${COLL_BIG_BYTES:-}" ] && big="$big --big-bytes $COLL_BIG_BYTES"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    env ${COLL_ENV:-} "$TR" -n "$n" --timeout "$launch_timeout" "$PROG" --out "$dir" $big \
        >"$dir/out" 2>&1 </dev/null
    rc=$?
    elapsed=$(($(date +%s) - t0))

    # The launch: exit status 0 and an END line from every rank.
    num=$((num + 1))
    missing=
    r=0
    while [ $r -lt "$n" ]; do
        grep -q '^END ' "$dir/r$r" 2>/dev/null || missing="$missing $r"
        r=$((r + 1))
    done
    # Every rank's "transport NAME carries the data of N peers" lines, if the log has them, must
    # name the intended transport with all its peers (one line per rank, none for another one).
    if [ "$transport" = shm ] || [ "$transport" = tcp ]; then
        want="transport $transport carries the data of $((n - 1)) peer"
    else
        want=$(printf '%s' "${COLL_EXPECT:-}" | sed "s/@/$((n - 1))/g")
    fi
    pat=$want
    nlines=$(grep -c 'transport [a-z]* carries the data of' "$dir/out")
    nright=$(grep -c "$pat" "$dir/out")
    # Another transport must be confirmed: every rank logs its line.
    case $transport in shm | tcp) ;; *) [ "$nlines" -ge "$n" ] || nright=-1 ;; esac
    what=
    case $big in --full-big*) what=", full product at the MB size" ;; esac
    [ -n "${COLL_BIG_BYTES:-}" ] && what="$what, large size $COLL_BIG_BYTES bytes"
    desc="$transport n=$n: launch of $n ranks ($elapsed s$what)"
    if [ "$rc" -eq 0 ] && [ -z "$missing" ] && [ "$nright" -eq "$nlines" ]; then
        echo "ok $num - $desc"
        [ "$nlines" -eq 0 ] && echo "# could not confirm the transport: no 'carries the data' line"
    else
        echo "not ok $num - $desc"
        echo "# tempo-run exited with status $rc${missing:+; no END line from rank(s)$missing}"
        [ "$rc" -eq 124 ] && echo "# (124: the hang guard, --timeout $launch_timeout, ended it)"
        [ "$nright" -ne "$nlines" ] &&
            echo "# $((nlines - nright)) rank(s) did not log '$want'"
        grep -v ' INFO ' "$dir/out" | tail -n 15 | cut -c 1-300 | sed 's/^/#   /'
        grep 'carries the data of' "$dir/out" | grep -v "$pat" | head -n 3 |
            cut -c 1-300 | sed 's/^/#   /'
    fi

    # One point per group, in the order of --list.
    files=
    r=0
    while [ $r -lt "$n" ]; do
        files="$files $dir/r$r"
        touch "$dir/r$r"
        r=$((r + 1))
    done
    # shellcheck disable=SC2086
    awk -v n="$n" -v tr="$transport" -v strict="$strict" -v num="$num" \
        -f "$srcdir/tests/mr/results.awk" "$tmp/groups" $files
    num=$((num + ngroups))
    echo "# $transport n=$n: $elapsed s"
done
echo "# $transport: all launches took $(($(date +%s) - t_start)) s"
