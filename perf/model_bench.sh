#!/bin/sh
# model_bench.sh — the trainer's GPT model against PyTorch on the CPU, in one run: forward +
# backward of the same configuration at the same thread count, tokens/s (B*T over the best
# iteration) and GFLOP/s (the trainer's FLOP count per token for both), alternating the two
# programs for ROUNDS rounds and keeping each one's best.
#
#   perf/model_bench.sh [-t "THREADS..."] [-R ROUNDS] [-- L NH C T B]
#
# Defaults: threads "1 <cores>", 3 rounds, model 4 4 128 128 8 (the README's main job). Needs
# tests/trainer/test_model (make check, or make tests/trainer/test_model) and Debian's python3-torch
# (/usr/bin/python3). PyTorch gets the benefit of the doubt on BLAS threads: unless
# OPENBLAS_NUM_THREADS is set, each round runs it with OpenBLAS at 1 thread and at THREADS (its
# intra-op threads and OpenBLAS's can oversubscribe the cores) and keeps the faster. The BLAS it
# loaded is printed: Debian's torch calls whatever libblas.so.3 points to, and the reference BLAS
# (libblas3) is many times slower than OpenBLAS (apt-get install libopenblas0-pthread).
set -u
here=$(dirname "$0")
threads="1 $(nproc 2>/dev/null || echo 1)"
rounds=3
while [ $# -gt 0 ]; do
    case $1 in
    -t) threads=$2; shift 2 ;;
    -R) rounds=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "model_bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ $# -eq 0 ] && set -- 4 4 128 128 8
[ $# -eq 5 ] || { echo "model_bench.sh: the model is 5 numbers: L NH C T B" >&2; exit 2; }
tm=${TEST_MODEL:-$here/../tests/trainer/test_model}
golden=$here/../tests/golden/make_gpt_golden.py
[ -x "$tm" ] || {
    echo "model_bench.sh: $tm not built (make tests/trainer/test_model)" >&2
    exit 1
}
/usr/bin/python3 -c "import torch" 2>/dev/null ||
    { echo "model_bench.sh: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 1; }
ob_fixed=${OPENBLAS_NUM_THREADS:-}

echo "# model L NH C T B = $*; $rounds rounds, best of each; $(uname -m), $(nproc) cores"
printf '%8s %14s %10s %14s %10s %8s\n' threads "tempo tok/s" GFLOP/s "torch tok/s" GFLOP/s ratio
status=0
for th in $threads; do
    best_c=0 best_p=0 gf_c=0 blas="" best_ob=-
    r=0
    while [ $r -lt "$rounds" ]; do
        r=$((r + 1))
        # ".. best of 20: fwd X ms, bwd Y ms, N tokens/s, G GFLOP/s"
        line=$(OMP_NUM_THREADS=$th "$tm" --bench "$@" 20 | tail -n 1) || status=1
        tok=$(printf '%s\n' "$line" | sed -n 's/.* \([0-9.]*\) tokens\/s, \([0-9.]*\) GFLOP\/s.*/\1/p')
        gf=$(printf '%s\n' "$line" | sed -n 's/.* \([0-9.]*\) GFLOP\/s.*/\1/p')
        if [ -n "$tok" ] && awk -v a="$tok" -v b="$best_c" 'BEGIN {exit !(a > b)}'; then
            best_c=$tok gf_c=$gf
        fi
        obs=$ob_fixed
        [ -n "$obs" ] || obs=$(printf '1\n%s\n' "$th" | sort -un)
        for ob in $obs; do
            line=$(OPENBLAS_NUM_THREADS=$ob /usr/bin/python3 "$golden" --bench "$@" 10 \
                --threads "$th" 2>&1 | tail -n 1) || status=1
            tok=$(printf '%s\n' "$line" | sed -n 's/.* \([0-9.]*\) tokens\/s;.*/\1/p')
            blas=$(printf '%s\n' "$line" | sed -n 's/.*; BLAS //p')
            if [ -n "$tok" ] && awk -v a="$tok" -v b="$best_p" 'BEGIN {exit !(a > b)}'; then
                best_p=$tok best_ob=$ob
            fi
        done
    done
    awk -v th="$th" -v c="$best_c" -v g="$gf_c" -v p="$best_p" 'BEGIN {
        fpt = (c > 0) ? g / c : 0
        ratio = (p > 0) ? sprintf("%.2fx", c / p) : "-"
        printf "%8d %14.0f %10.1f %14.0f %10.1f %8s\n", th, c, g, p, p * fpt, ratio
    }'
    echo "#   PyTorch's best with OPENBLAS_NUM_THREADS=$best_ob; BLAS: ${blas:-unknown}"
done
exit $status
