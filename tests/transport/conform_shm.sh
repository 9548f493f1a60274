#!/bin/sh
# tests/transport/conform_shm.sh — the transport conformance suite on shm, for make check
# (tests/transport/conform.sh documents it).
exec sh "$(dirname "$0")/conform.sh" shm
