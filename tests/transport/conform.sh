#!/bin/sh
# tests/transport/conform.sh TRANSPORT — the transport conformance suite: what every transport must
# do, run unchanged on the one named (TRANSPORT, or $CONFORM_TRANSPORT):
#   shm      the default selection on one host (shared memory between every pair)
#   tcp      TEMPO_TRANSPORTS=tcp,^shm: every pair over tcp on one host
#   tcp-sealed  the same with TEMPO_ENCRYPT=1: every byte between ranks sealed (AES-256-GCM)
#   ucx-tcp  TEMPO_TRANSPORTS=ucx,^shm with UCX_TLS=tcp,self
#   ucx-sm   TEMPO_TRANSPORTS=ucx,^shm with UCX_TLS=sm,cma,self
#   ucx-sm-zcopy  ucx-sm with TEMPO_UCX_ZCOPY_ALWAYS=1: large payloads read with ucp_get_nbx over
#            cma; these endpoints have no peer-failure handling, so a peer's death during a read
#            aborts the reader (README): the conform layer runs the cases in which no rank dies
#            (CONFORM_CASES), and the default layers are "conform coll zcopy"
#   verbs    TEMPO_TRANSPORTS=verbs,^shm (a Soft-RoCE device: rdma link add rxe0 type rxe netdev
#            lo, or the qemu guest of tests/transport)
# A transport that `tempo-info -t` does not list as available here skips the whole suite (TAP
# "1..0 # SKIP", with tempo-info's reason). Every rank runs on this host.
#
# Layers (CONFORM_LAYERS, default "conform coll mismatch difftest"), each one TAP stream renumbered
# into this one, its points prefixed with the layer's name:
#   conform    tests/transport/conform at 2 and 3 ranks: point-to-point order and tags, every size
#              from 0 B to 256 MiB, 4096 messages in flight, partial progress, size mismatch, a rank
#              killed (SIGKILL) or stopped (SIGSTOP), a sender killed before its large message was
#              received, goodbye and abort; then conform_frames:
#              malformed and truncated frames written raw onto the data channel (their headers have
#              the details)
#   coll       the collective suite (tests/mr/coll_run.sh, coll_test) at COLL_RANKS ("2 3 4")
#   mismatch   tests/fault/fault_mismatch: ranks whose calls differ all fail naming the difference
#   zcopy      4 MiB sendrecv_perf at 2 ranks with TEMPO_DEBUG=INFO: both ranks log that they sent
#              and received payloads zero-copy (the transport's "received zero-copy" count > 0)
#   difftest   the randomized differential test (tests/mr/difftest.sh) at DIFFTEST_RANKS ("2 3 4"),
#              DIFFTEST_CASES (100) cases per launch, without the Open MPI comparison
#              (DIFFTEST_MPI=0 unless set)
# On shm the last three are exactly what coll_shm.sh, fault_mismatch and difftest.sh run in make
# check, so make check's shm instance (conform_shm.sh) runs the conform layer only.
#
# Run it by hand from the build directory, for example
#     sh tests/transport/conform.sh ucx-sm
#     CONFORM_LAYERS=conform sh tests/transport/conform.sh tcp
# Knobs: CONFORM_LAYERS, CONFORM_ARGS (more arguments of conform: --max-bytes 1048576 for a slow
# sanitizer build, --seed N to replay), CONFORM_TIMEOUT (hang guard per layer, 1200 s), and those of
# the layers (COLL_*, DIFFTEST_*). Times on the 2-core VM, shared: the conform layer 80 s (shm)
# and 70 s (tcp: frames are quicker, each refused frame closes a socket), coll at 2-4 ranks
# 120-150 s, mismatch 60 s, difftest a few seconds.

transport=${1:-${CONFORM_TRANSPORT:-}}
B=${top_builddir:-.}
srcdir=${top_srcdir:-$(dirname "$0")/../..}
INFO="$B/tools/tempo-info"
CONFORM="$B/tests/transport/conform"
FRAMES="$B/tests/transport/conform_frames"
layers=${CONFORM_LAYERS:-conform coll mismatch difftest}
cases=${CONFORM_CASES:-}

case $transport in
shm) tl=shm tenv= ;;
tcp) tl=tcp tenv="TEMPO_TRANSPORTS=tcp,^shm" ;;
tcp-sealed) tl=tcp tenv="TEMPO_TRANSPORTS=tcp,^shm TEMPO_ENCRYPT=1 TEMPO_AUTH_KEY=conform-sealed" ;;
ucx-tcp) tl=ucx tenv="TEMPO_TRANSPORTS=ucx,^shm UCX_TLS=tcp,self" ;;
ucx-sm) tl=ucx tenv="TEMPO_TRANSPORTS=ucx,^shm UCX_TLS=sm,cma,self" ;;
ucx-sm-zcopy)
    tl=ucx tenv="TEMPO_TRANSPORTS=ucx,^shm UCX_TLS=sm,cma,self TEMPO_UCX_ZCOPY_ALWAYS=1"
    layers=${CONFORM_LAYERS:-conform coll zcopy}
    cases=${CONFORM_CASES:-transport,order,sizes,flood,partial,mismatch,goodbye}
    ;;
verbs) tl=verbs tenv="TEMPO_TRANSPORTS=verbs,^shm" ;;
*)
    echo "Bail out! usage: conform.sh shm|tcp|tcp-sealed|ucx-tcp|ucx-sm|ucx-sm-zcopy|verbs (got '$transport')"
    exit 1
    ;;
esac
# The programs are built; nothing from the caller's environment may change what is tested (every
# TEMPO_* variable is cleared: the layers start from the transport's settings alone); $tmp.
. "$srcdir/tests/mr/launch.sh"
TR=$INFO CONFORM_TIMEOUT=${CONFORM_TIMEOUT:-1200}
mr_prepare CONFORM "$CONFORM" "$FRAMES"
unset FAULT_ENV COLL_ENV COLL_EXPECT DIFFTEST_ENV DIFFTEST_TRANSPORTS UCX_TLS

# tempo-info -t: "  NAME   available   detail" or "  NAME   not available  why".
line=$(env $tenv "$INFO" -t 2>&1 | awk -v t="$tl" '$1 == t')
case $line in
*"not available"*)
    echo "1..0 # SKIP $transport: $(printf '%s' "$line" | sed 's/^ *[a-z]* *not available *//')"
    exit 0
    ;;
*available*) ;;
*)
    echo "1..0 # SKIP $transport: tempo-info -t does not list $tl in this build"
    exit 0
    ;;
esac

# What one of every rank's INIT log lines must say with $1 peers: the transport carries them all
# ('@' stands for the number of peers in COLL_EXPECT, which serves every rank count).
expect() {
    echo "transport $tl carries the data of $1 peer"
}

# zcopy_check: TAP of the zcopy layer (above).
zcopy_check() {
    echo "1..3"
    # shellcheck disable=SC2086 # $tenv is a list of assignments
    timeout 120 env $tenv TEMPO_DEBUG=INFO TEMPO_DEBUG_SUBSYS=TRANSPORT TEMPO_TIMEOUT=30 \
        "$B/tools/tempo-run" -n 2 "$B/perf/sendrecv_perf" -b 4M -e 4M -n 5 >"$tmp/zc" 2>&1
    _zrc=$?
    sed 's/^/# /' "$tmp/zc" | tail -n 20
    [ "$_zrc" -eq 0 ] && echo "ok 1 - sendrecv_perf of 4 MiB exited 0 (every element right)" ||
        echo "not ok 1 - sendrecv_perf of 4 MiB exited $_zrc"
    for r in 0 1; do
        if grep "^\[$r\]" "$tmp/zc" | grep -q "payloads sent and [1-9][0-9]* received zero-copy"; then
            echo "ok $((r + 2)) - rank $r received payloads zero-copy"
        else
            echo "not ok $((r + 2)) - rank $r logs no payload received zero-copy"
        fi
    done
}

num=0
failed=0
# sub NAME CMD...: run a TAP producer under the hang guard and renumber its points into this
# stream, "NAME: " before each description. A producer that skips itself as a whole becomes one
# skipped point; one that runs fewer points than it planned, bails out or exits non-zero (other
# than after reporting failures) adds a failed point saying so.
sub() {
    _name=$1
    shift
    _t0=$(date +%s)
    timeout "$guard" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    _rc=$?
    _res=$(awk -v name="$_name" -v num="$num" -v rc="$_rc" -v secs="$(($(date +%s) - _t0))" \
        -v guard="$guard" -v out="$tmp/tap" '
        function emit(s) { print s > out }
        /^1\.\.[0-9]+/ {
            hasplan = 1; plan = $0; sub(/^1\.\./, "", plan); plan = plan + 0
            if ($0 ~ /# *SKIP/) { skipwhy = $0; sub(/^[^#]*# *SKIP */, "", skipwhy) }
            next
        }
        /^(not )?ok/ {
            ran++; num++
            bad += /^not ok/
            s = $0; pre = /^not ok/ ? "not ok" : "ok"
            sub(/^(not )?ok *[0-9]* *-? */, "", s)
            emit(pre " " num " - " name ": " s)
            next
        }
        /^Bail out!/ { num++; bad++; emit("not ok " num " - " name ": " $0); next }
        /^#/ { emit($0); next }
        { emit("# " $0) }
        END {
            if (plan == 0 && ran == 0 && skipwhy != "") {
                num++; emit("ok " num " - " name " # SKIP " skipwhy)
            } else if (ran != plan || !hasplan) {
                num++; bad++
                emit("not ok " num " - " name ": ran " ran " of " plan " planned points (exit " \
                     rc (rc == 124 ? ": the hang guard of " guard " s ended it" : "") ")")
            } else if (rc != 0 && bad == 0) {
                num++; bad++
                emit("not ok " num " - " name ": exited " rc " without a failed point")
            }
            emit("# " name ": " ran " points, " secs " s")
            print num, bad
        }' "$tmp/out")
    cat "$tmp/tap"
    if [ -s "$tmp/err" ] && grep -q '^not ok' "$tmp/tap"; then
        echo "# $_name: the last lines of its standard error:"
        tail -n 15 "$tmp/err" | cut -c 1-300 | sed 's/^/#   /'
    fi
    num=${_res% *}
    failed=$((failed + ${_res#* }))
}

echo "# conform.sh $transport: ${tenv:-default transports} (tempo-info: $(echo $line))"
t_start=$(date +%s)
label=$transport
[ "$transport" = shm ] || label="$transport-only" # coll_run.sh's and difftest.sh's tcp mean more
# How each layer is put on the transport (tests/fault/job.h, coll_run.sh, difftest.sh).
FAULT_ENV=$tenv COLL_ENV=$tenv COLL_EXPECT=$(expect @) DIFFTEST_ENV=$tenv DIFFTEST_TRANSPORTS=$label
COLL_RANKS=${COLL_RANKS:-2 3 4} DIFFTEST_RANKS=${DIFFTEST_RANKS:-2 3 4}
DIFFTEST_CASES=${DIFFTEST_CASES:-100} DIFFTEST_MPI=${DIFFTEST_MPI:-0} top_builddir=$B
top_srcdir=$srcdir
export FAULT_ENV COLL_ENV COLL_EXPECT DIFFTEST_ENV DIFFTEST_TRANSPORTS COLL_RANKS DIFFTEST_RANKS \
    DIFFTEST_CASES DIFFTEST_MPI top_builddir top_srcdir
for layer in $layers; do
    case $layer in
    conform)
        for n in 2 3; do
            # shellcheck disable=SC2086 # $CONFORM_ARGS is a word list
            sub "conform n=$n" "$CONFORM" -n "$n" --expect "$(expect $((n - 1)))" \
                ${cases:+--only "$cases"} ${CONFORM_ARGS:-}
            sub "frames n=$n" "$FRAMES" -n "$n"
        done
        ;;
    coll)
        sub coll sh "$srcdir/tests/mr/coll_run.sh" "$label"
        ;;
    mismatch)
        sub mismatch "$B/tests/fault/fault_mismatch"
        ;;
    difftest)
        sub difftest sh "$srcdir/tests/mr/difftest.sh"
        ;;
    zcopy)
        zcopy_check >"$tmp/zctap" 2>&1
        sub zcopy cat "$tmp/zctap"
        ;;
    *)
        num=$((num + 1))
        failed=$((failed + 1))
        echo "not ok $num - unknown layer '$layer' in CONFORM_LAYERS"
        ;;
    esac
done
echo "# conform.sh $transport: $num points, $failed failed, $(($(date +%s) - t_start)) s"
echo "1..$num"
[ "$failed" -eq 0 ]
