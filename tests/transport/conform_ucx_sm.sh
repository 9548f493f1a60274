#!/bin/sh
# tests/transport/conform_ucx_sm.sh — the transport conformance suite on ucx with
# UCX_TLS=sm,cma,self (TEMPO_TRANSPORTS=ucx,^shm, every rank on this host: shared memory; no
# zero copy, since these endpoints have no peer-failure handling), for make check
# (tests/transport/conform.sh documents it):
# every layer, the collective suite at 2 and 3 ranks (the whole product at the MB size at 2), as
# conform_tcp.sh. Skipped without UCX.
COLL_RANKS=${COLL_RANKS:-2 3} COLL_FULL_BIG_MAX=${COLL_FULL_BIG_MAX:-2} \
    exec sh "$(dirname "$0")/conform.sh" ucx-sm
