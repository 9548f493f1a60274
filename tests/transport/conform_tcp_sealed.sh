#!/bin/sh
# tests/transport/conform_tcp_sealed.sh — the transport conformance suite on tcp with TEMPO_ENCRYPT=1
# (every byte between ranks sealed: transport/seal.h), for make check (tests/transport/conform.sh
# documents it): the conform layer (point-to-point, every size to 256 MiB, deaths, frames) and the
# collective suite at 2 and 3 ranks. About 2.5 minutes on the 2-core VM. tests/mr/sealed.sh has
# the man in the middle.
CONFORM_LAYERS=${CONFORM_LAYERS:-conform coll} COLL_RANKS=${COLL_RANKS:-2 3} \
    COLL_FULL_BIG_MAX=${COLL_FULL_BIG_MAX:-2} exec sh "$(dirname "$0")/conform.sh" tcp-sealed
