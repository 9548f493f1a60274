#!/bin/sh
# tests/mr/coll_ucx_sm.sh — the collectives over ucx with UCX_TLS=sm,cma,self (coll_ucx.sh).
exec sh "$(dirname "$0")/coll_ucx.sh" sm,cma,self
