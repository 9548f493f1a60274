#!/bin/sh
# tests/transport/conform_ucx_zcopy.sh — the transport conformance suite on ucx with
# UCX_TLS=sm,cma,self and TEMPO_UCX_ZCOPY_ALWAYS=1 (payloads of 256 KiB and more read zero-copy with
# ucp_get_nbx over cma), for make check (tests/transport/conform.sh documents it): the conform
# layer without the cases in which a rank dies, the collective suite at 2 ranks, and a check that
# both ranks log payloads received zero-copy. Skipped without UCX.
COLL_RANKS=${COLL_RANKS:-2} COLL_FULL_BIG_MAX=${COLL_FULL_BIG_MAX:-2} \
    exec sh "$(dirname "$0")/conform.sh" ucx-sm-zcopy
