#!/bin/sh
# tests/mr/transports.sh — the transport table as users drive it: tempo-info -t, TEMPO_TRANSPORTS
# (order, ^exclusions, shm first within a host), the per-peer choice logged at TEMPO_DEBUG=INFO,
# and the refusals: a value the table refuses, ranks that disagree, a peer no listed transport
# reaches. Every job is perf/all_reduce_perf with its check on (#wrong counted), 3 ranks on this
# host unless said otherwise; "hosts" are emulated with TEMPO_HOST_ID per rank.
#
#   info      tempo-info -t lists shm, tcp, ucx and verbs, each available or with the reason.
#   choice    unset / tcp / tcp,shm / tcp,^shm / ^shm: every rank logs which transport carries its
#             peers (shm first within a host unless placed or excluded), and the results are right.
#   hosts     2 emulated hosts of 2 ranks: unset puts same-host pairs on shm, the others on tcp;
#             TEMPO_TRANSPORTS=shm reaches no peer on the other host: every rank fails, naming it.
#   agree     one rank with another TEMPO_TRANSPORTS, or with TEMPO_SHM=0: every rank fails at
#             init saying the ranks disagree (a silent split would pair shm with tcp and hang).
#   refused   unknown names, repeats, an empty entry, nothing left: tempo-info -c marks the value
#             REFUSED and a job fails with TEMPO_ERR_INVALID and the same message.
#   cma       shm's single-copy path (TEMPO_SHM_CMA_BYTES=4K): both ranks log that they use it and
#             send/receive from 4K to 4M is right; with 0 nobody logs it and the rings carry it.
#   fallback  a transport this machine cannot use (verbs without an RDMA device, or not built)
#             listed first: the data goes over the next one and the job succeeds.
#   proof     ucx with the job key tempo-run makes: both ranks' endpoints prove it and ucx carries
#             the data; with rank 1's first bytes on each endpoint altered or dropped by a man in the
#             middle (tests/transport/libucx_mitm.so, LD_PRELOAD on rank 1), over UCX_TLS=tcp and
#             sm: rank 0 refuses the endpoint (saying why), rank 1 learns it, the pair goes over
#             tcp, and the results are right; a stranger in rank 1's process (a UCX worker of its
#             own with an endpoint to rank 0's address) sending stream bytes and a credit that
#             names rank 1: rank 0 ignores the credit, saying so, ucx still carries the data and
#             the results are right. Skipped without ucx or without a key (no libcrypto).
# POSIX sh, run by the automake harness with top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/mr/transports.sh

srcdir=${top_srcdir:-$(dirname "$0")/../..}
B="${top_builddir:-.}"
INFO="$B/tools/tempo-info"
TR="$B/tools/tempo-run"
PERF="$B/perf/all_reduce_perf"
. "$srcdir/tests/mr/launch.sh"
mr_prepare TRANSPORTS "$INFO" "$PERF"

n=0

# job N ENV...: N ranks with ENV (NAME=VALUE words; RANK1_X=V sets X=V on rank 1 only, HOSTS=1
# gives rank r the host id h(r/2)); status in rc, output in $tmp/job.out.
job() {
    _n=$1
    shift
    mr_wrap
    env TEMPO_DEBUG=INFO "$@" timeout 120 "$TR" -n "$_n" --timeout 30 sh "$tmp/wrap.sh" "$PERF" \
        -b 8 -e 256K -f 64 -n 2 -w 1 >"$tmp/job.out" 2>&1 </dev/null
    rc=$?
}

# carried T: how many ranks logged that transport T carries the data of some peers
carried() {
    grep -c "INFO  INIT .*transport $1 carries the data of" "$tmp/job.out"
}
wrong() { # rows with a non-zero #wrong in either column
    awk '/^\[0\] +[0-9]+ +[0-9]+ / { if ($10 != 0 || ($14 != 0 && $14 != "N/A")) w++ }
        END { print w + 0 }' \
        "$tmp/job.out"
}
rows() {
    grep -c '^\[0\] \+[0-9]\+ \+[0-9]\+ ' "$tmp/job.out"
}

echo "1..27"

# ---- info
"$INFO" -t >"$tmp/info.out" 2>&1
c=0
for t in shm tcp ucx verbs; do
    grep -q "^  $t  *\(available\|not available  .\)" "$tmp/info.out" || c=1
done
check $c "tempo-info -t lists shm, tcp, ucx and verbs, each available or with the reason" \
    "$tmp/info.out"

# ---- choice: VALUE, the transport expected for every peer, the one expected nowhere
for case in "-:shm:tcp" "tcp:shm:tcp" "tcp,shm:tcp:shm" "tcp,^shm:tcp:shm" "^shm:tcp:shm"; do
    v=${case%%:*} rest=${case#*:}
    want=${rest%%:*} never=${rest#*:}
    if [ "$v" = - ]; then job 3; v=unset; else job 3 TEMPO_TRANSPORTS="$v"; fi
    c=1
    [ "$rc" = 0 ] && [ "$(carried "$want")" = 3 ] && [ "$(carried "$never")" = 0 ] &&
        [ "$(rows)" -ge 3 ] && [ "$(wrong)" = 0 ] && c=0
    check $c "TEMPO_TRANSPORTS=$v: all 3 ranks put their peers on $want, none on $never; results right" \
        "$tmp/job.out"
done

# ---- hosts
job 4 HOSTS=1
c=1
[ "$rc" = 0 ] && [ "$(grep -c 'transport shm carries the data of 1 peer' "$tmp/job.out")" = 4 ] &&
    [ "$(grep -c 'transport tcp carries the data of 2 peers' "$tmp/job.out")" = 4 ] &&
    [ "$(wrong)" = 0 ] && c=0
check $c "2 emulated hosts of 2 ranks: the same-host peer over shm, the 2 others over tcp, results right" \
    "$tmp/job.out"
job 4 HOSTS=1 TEMPO_TRANSPORTS=shm
c=1
[ "$rc" != 0 ] && [ "$(grep -c "no transport of 'shm' reaches rank" "$tmp/job.out")" -ge 2 ] && c=0
check $c "TEMPO_TRANSPORTS=shm across 2 emulated hosts: the job fails, naming a peer no transport reaches" \
    "$tmp/job.out"

# ---- agree
for v in "TEMPO_TRANSPORTS=tcp,^shm" "TEMPO_SHM=0" "TEMPO_TRANSPORTS=shm,tcp"; do
    job 3 RANK1_ENV="$v"
    c=1
    if [ "$v" = "TEMPO_TRANSPORTS=shm,tcp" ]; then
        # the same resolved order as the default: not a disagreement
        [ "$rc" = 0 ] && [ "$(wrong)" = 0 ] && c=0
        check $c "rank 1 alone with $v (the default order spelled out) agrees with the others" \
            "$tmp/job.out"
        continue
    fi
    # (tempo-run ends the other ranks when the first fails, so not every rank may get to say it)
    [ "$rc" != 0 ] && grep -q 'tempo_comm_init_env failed: TEMPO_ERR_INVALID: ranks disagree on the transports' \
        "$tmp/job.out" && ! grep -q '^\[0\] \+[0-9]\+ \+[0-9]\+ ' "$tmp/job.out" && c=0
    check $c "rank 1 alone with $v: the job refuses to start, saying the ranks disagree (status $rc)" \
        "$tmp/job.out"
done

# ---- refused
for v in "foo" "tcp,tcp" "tcp,^tcp" "tcp,,shm" "^shm,^tcp" "shm,"; do
    env TEMPO_TRANSPORTS="$v" "$INFO" -c >"$tmp/info.out" 2>&1
    irc=$?
    job 2 TEMPO_TRANSPORTS="$v"
    msg=$(sed -n "s/.*TEMPO_TRANSPORTS='$v' is not valid: //p" "$tmp/info.out" | head -n 1)
    c=1
    [ "$irc" = 1 ] && grep -q "TEMPO_TRANSPORTS='$v' *REFUSED" "$tmp/info.out" && [ -n "$msg" ] &&
        [ "$rc" != 0 ] && grep -q 'TEMPO_ERR_INVALID' "$tmp/job.out" &&
        grep -qF "$msg" "$tmp/job.out" && c=0
    check $c "TEMPO_TRANSPORTS='$v': tempo-info -c refuses it and a job fails with the same message ($msg)" \
        "$tmp/info.out" "$tmp/job.out"
done

# ---- cma
for v in 4K 0; do
    env TEMPO_DEBUG=INFO TEMPO_DEBUG_SUBSYS=TRANSPORT TEMPO_SHM_CMA_BYTES=$v timeout 120 "$TR" -n 2 \
        --timeout 30 "$B/perf/sendrecv_perf" -b 4K -e 4M -f 4 -n 2 -w 1 >"$tmp/job.out" 2>&1 </dev/null
    rc=$?
    said=$(grep -c 'copied once (CMA) with all 1 peers' "$tmp/job.out")
    c=1
    if [ "$v" = 4K ]; then
        [ "$rc" = 0 ] && [ "$said" = 2 ] && [ "$(rows)" = 6 ] && [ "$(wrong)" = 0 ] && c=0
        check $c "TEMPO_SHM_CMA_BYTES=4K: both ranks copy once through CMA; 4K to 4M arrive right" \
            "$tmp/job.out"
    else
        [ "$rc" = 0 ] && [ "$said" = 0 ] && [ "$(rows)" = 6 ] && [ "$(wrong)" = 0 ] && c=0
        check $c "TEMPO_SHM_CMA_BYTES=0: the rings carry everything; 4K to 4M arrive right" \
            "$tmp/job.out"
    fi
done

# ---- fallback: verbs cannot run here (no RDMA device, or not built)
if "$INFO" -t | grep -q '^  verbs  *available'; then
    ok "# SKIP verbs is usable on this machine: no fallback to test"
    ok "# SKIP verbs is usable on this machine: no fallback to test"
else
    job 3 TEMPO_TRANSPORTS="verbs,tcp,^shm"
    c=1
    [ "$rc" = 0 ] && [ "$(carried tcp)" = 3 ] && [ "$(carried verbs)" = 0 ] && [ "$(wrong)" = 0 ] &&
        c=0
    check $c "TEMPO_TRANSPORTS=verbs,tcp,^shm where verbs cannot run: the data goes over tcp" \
        "$tmp/job.out"
    job 3 TEMPO_TRANSPORTS="verbs,^shm"
    c=1
    [ "$rc" != 0 ] && grep -q "no transport of 'verbs' reaches rank\|leaves no transport" \
        "$tmp/job.out" && c=0
    check $c "TEMPO_TRANSPORTS=verbs,^shm where verbs cannot run: the job fails, saying why" \
        "$tmp/job.out"
fi

# ---- proof
mitm="$B/tests/transport/libucx_mitm.so"
if ! "$INFO" -t | grep -q '^  ucx  *available' || ! "$INFO" -b | grep -q '^  crypto  *yes' ||
    [ ! -f "$mitm" ]; then
    for i in 1 2 3 4 5 6; do
        ok "# SKIP ucx not available, no libcrypto, or $mitm not built"
    done
else
    job 2 TEMPO_TRANSPORTS=ucx,^shm,tcp UCX_TLS=tcp,self
    c=1
    [ "$rc" = 0 ] && [ "$(carried ucx)" = 2 ] && [ "$(carried tcp)" = 0 ] && [ "$(wrong)" = 0 ] &&
        ! grep -q 'did not prove' "$tmp/job.out" && c=0
    check $c "ucx with a job key: both endpoints prove it, ucx carries the data, results right" \
        "$tmp/job.out"
    for case in "tcp,self:flip:a wrong MAC" "tcp,self:drop:not all of it came within 5 s" "sm,cma,self:flip:a wrong MAC"; do
        tls=${case%%:*} rest=${case#*:}
        mode=${rest%%:*} why=${rest#*:}
        job 2 TEMPO_TRANSPORTS=ucx,^shm,tcp UCX_TLS=$tls RANK1_ENV="LD_PRELOAD=$mitm MITM_UCX=$mode"
        c=1
        [ "$rc" = 0 ] && [ "$(carried tcp)" = 2 ] && [ "$(carried ucx)" = 0 ] &&
            [ "$(wrong)" = 0 ] && [ "$(rows)" -ge 3 ] &&
            grep -q "^\[0\] .*WARN.*ucx: the endpoint to rank 1 (host [^)]*) did not prove the job key ($why): refused" \
                "$tmp/job.out" &&
            grep -q "^\[1\] .*WARN.*ucx: rank 0 refused this rank's endpoint" "$tmp/job.out" && c=0
        check $c "UCX_TLS=$tls, rank 1's first bytes on its endpoint ${mode}ped by a man in the middle: rank 0 refuses it ($why), rank 1 is told, the pair goes over tcp, results right" \
            "$tmp/job.out"
    done
    for tls in tcp,self sm,cma,self; do
        job 2 TEMPO_TRANSPORTS=ucx,^shm,tcp UCX_TLS=$tls RANK1_ENV="LD_PRELOAD=$mitm MITM_UCX=stranger"
        c=1
        [ "$rc" = 0 ] && [ "$(carried ucx)" = 2 ] && [ "$(wrong)" = 0 ] && [ "$(rows)" -ge 3 ] &&
            grep -q "^\[0\] .*WARN.*ucx: a credit naming rank 1 came on an endpoint that is not that rank's: ignored" \
                "$tmp/job.out" && c=0
        check $c "UCX_TLS=$tls, a stranger with rank 0's worker address sends stream bytes and a credit naming rank 1: the credit is ignored (said), ucx carries the data, results right" \
            "$tmp/job.out"
    done
fi
