#!/bin/sh
# tests/transport/conform_tcp.sh — the transport conformance suite on tcp, for make check
# (tests/transport/conform.sh documents it).
exec sh "$(dirname "$0")/conform.sh" tcp
