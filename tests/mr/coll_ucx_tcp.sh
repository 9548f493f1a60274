#!/bin/sh
# tests/mr/coll_ucx_tcp.sh — the collectives over ucx with UCX_TLS=tcp,self (coll_ucx.sh).
exec sh "$(dirname "$0")/coll_ucx.sh" tcp,self
