#!/bin/sh
# tests/transport/conform_tcp.sh — the transport conformance suite on tcp (TEMPO_TRANSPORTS=tcp,^shm,
# every rank on this host), for make check (tests/transport/conform.sh documents it): every layer,
# the collective suite at 2 and 3 ranks. About 3 minutes on the 2-core VM.
COLL_RANKS=${COLL_RANKS:-2 3} exec sh "$(dirname "$0")/conform.sh" tcp
