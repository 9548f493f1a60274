#!/bin/sh
# tests/transport/conform_tcp.sh — the transport conformance suite on tcp
# (TEMPO_TRANSPORTS=tcp,^shm, every rank on this host), for make check
# (tests/transport/conform.sh documents it): every layer, the collective suite at 2 and 3 ranks
# (the whole product at the MB size at 2). About 4 to 5 minutes on the 2-core VM.
COLL_RANKS=${COLL_RANKS:-2 3} COLL_FULL_BIG_MAX=${COLL_FULL_BIG_MAX:-2} \
    exec sh "$(dirname "$0")/conform.sh" tcp
