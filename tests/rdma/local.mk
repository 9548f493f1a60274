# tests/rdma/local.mk — tests on real RDMA verbs in a qemu guest with Soft-RoCE (rdma_rxe).
# rxe-vm.sh boots the guest and runs a command in it (see its header); rxe_smoke.sh checks the
# guest (rxe0 ACTIVE, its IPv4 GID, ibv_rc_pingpong) and runs tests/mr/coll_tcp.sh at 2 ranks in
# it. Skipped where the guest cannot run (not root, no qemu or kernel and no network, no boot).
TESTS += %reldir%/rxe_smoke.sh
EXTRA_DIST += %reldir%/rxe_smoke.sh %reldir%/rxe-vm.sh %reldir%/lib.sh

# The verbs transport on real verbs: verbs_rxe.sh boots the Soft-RoCE guest
# (tests/rdma/rxe-vm.sh) and runs the collective tests, verbs_fault and the device and fallback
# checks there with TEMPO_TRANSPORTS=verbs,^shm; skipped with the reason where the guest cannot
# run. verbs_bench.sh (by hand) compares all_reduce_perf over verbs and tcp in the guest.
check_PROGRAMS += %reldir%/verbs_fault
%canon_reldir%_verbs_fault_SOURCES = %reldir%/verbs_fault.c
%canon_reldir%_verbs_fault_LDADD = libtempo.la
TESTS += %reldir%/verbs_rxe.sh
EXTRA_DIST += %reldir%/verbs_rxe.sh %reldir%/verbs_bench.sh
