#!/bin/sh
# tests/trainer/mpi_layouts.sh — tempo-train's mpi backend (--backend mpi under mpirun) on the
# hybrid layouts, the comparison issue 17 asks for (its DP layouts are layouts.sh part 4):
#   1. step 0: the loss and the full gradient of TP=2, PP=2 1f1b and DP=2 x TP=2 equal the
#      single-rank (tempo) run of the same global batch within 1e-5 (tests/trainer/dumpcmp);
#   2. 10 steps of TP=2 x PP=2 on mpi track the same layout on the tempo backend within 1e-4;
#   3. DP=2 ZeRO 3 with 4 micro-batches per step: 20 steps on mpi equal the tempo backend's
#      within 1e-6 (they are bitwise equal: a mean of two is exact in either order). A
#      reduce-scatter that the backend's MPI_Testall completed between posts used to be left
#      unfinished (not copied to the rank's slice, not scaled), in 6 of 6 runs of this size.
# Skipped, with the reason, when tempo-train was built without MPI or mpirun cannot start a process
# here (tests/mr/launch.sh's mr_mpirun).
# Model: 4 layers, 2 heads, 32 channels, context 32; 8 sequences per global batch (--batch 4
# --accum 2 at one rank: the pipeline's 2 micro-batches of 4).
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 4 --heads 2 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"
# mrun, mstep0: lib.sh

echo "1..6"
mpi_skip 6

# 1. step 0 against one rank
launch 1 "$tmp/ref.log" --out "$tmp/ref" --batch 4 --accum 2 --dump "$tmp/ref.bin"
point $? "single-rank step-0 dump (tempo), 2 micro-batches of 4" "$tmp/ref.log"
mstep0 2 "TP=2" --tp 2 --batch 4 --accum 2
mstep0 2 "PP=2 1f1b M=2" --pp 2 --batch 4 --micro 2
mstep0 4 "DP=2 x TP=2" --dp 2 --tp 2 --batch 2 --accum 2

# 2. 10 steps against the tempo backend
launch 4 "$tmp/t.log" --out "$tmp/t" --tp 2 --pp 2 --batch 4 --micro 2 --steps 10
mrun 4 "$tmp/m" --tp 2 --pp 2 --batch 4 --micro 2 --steps 10
track "$tmp/t" "$tmp/m" 10 1e-4 \
    "mpi backend, TP=2 x PP=2: 10 steps track the tempo backend's losses within 1e-4"

# 3. ZeRO 3's reduce-scatters and all-gathers interleaved, against the tempo backend
launch 2 "$tmp/tz.log" --out "$tmp/tz" --zero 3 --batch 1 --accum 4 --steps 20
mrun 2 "$tmp/mz" --zero 3 --batch 1 --accum 4 --steps 20
track "$tmp/tz" "$tmp/mz" 20 1e-6 \
    "mpi backend, DP=2 ZeRO 3, 4 micro-batches: 20 steps equal the tempo backend's within 1e-6"
