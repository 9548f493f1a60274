#!/bin/sh
# tests/transport/conform_shm.sh — the transport conformance suite on shm, for make check
# (tests/transport/conform.sh documents it): the conform layer only, since its other layers on shm
# are exactly coll_shm.sh, fault_mismatch and difftest.sh, which make check runs anyway.
# About 80 s on the 2-core VM.
CONFORM_LAYERS=${CONFORM_LAYERS:-conform} exec sh "$(dirname "$0")/conform.sh" shm
