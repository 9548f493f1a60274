#!/bin/sh
# tests/mr/coll_ucx.sh UCX_TLS — every collective (coll_run.sh, coll_test.c) with all data over the
# ucx transport (TEMPO_TRANSPORTS=ucx,^shm, every rank on this host) and UCX's transports limited
# to UCX_TLS: coll_ucx_tcp.sh gives tcp,self (UCP streams over sockets), coll_ucx_sm.sh
# sm,cma,self (shared memory, which UCX 1.13 reaches only without peer-failure handling). Each
# launch must log that ucx carried the data of all its peers.
# Rank counts 2, 3 and 4 (COLL_RANKS), the whole product at the MB size: on a 2-core machine the
# pair takes about N minutes. Skipped where the build has no UCX (tempo-info -t says so).
tls=$1
TR_INFO="${top_builddir:-.}/tools/tempo-info"
if ! "$TR_INFO" -t 2>/dev/null | grep -q '^ *ucx *available'; then
    echo "1..0 # SKIP this build has no ucx transport ($("$TR_INFO" -t 2>/dev/null |
        grep '^ *ucx' | sed 's/^ *ucx *not available *//'))"
    exit 0
fi
UCX_TLS=$tls
export UCX_TLS
# Over cma UCX has a one-sided lane: the MB-size payloads must go zero-copy (ucp_get_nbx).
case $tls in *cma*) COLL_UCX_ZCOPY=1 && export COLL_UCX_ZCOPY ;; esac
COLL_RANKS=${COLL_RANKS:-2 3 4}
export COLL_RANKS
exec sh "$(dirname "$0")/coll_run.sh" ucx
