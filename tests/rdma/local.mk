# tests/rdma/local.mk — tests on real RDMA verbs in a qemu guest with Soft-RoCE (rdma_rxe).
# rxe-vm.sh boots the guest and runs a command in it (see its header); rxe_smoke.sh checks the
# guest (rxe0 ACTIVE, its IPv4 GID, ibv_rc_pingpong) and runs tests/mr/coll_tcp.sh at 2 ranks in
# it. Skipped where the guest cannot run (not root, no qemu or kernel and no network, no boot).
TESTS += %reldir%/rxe_smoke.sh
EXTRA_DIST += %reldir%/rxe_smoke.sh %reldir%/rxe-vm.sh
