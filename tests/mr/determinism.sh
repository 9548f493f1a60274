#!/bin/sh
# tests/mr/determinism.sh — tempo.h's determinism promise through real processes: with the same
# inputs, rank count and algorithm, reductions give bitwise the same result from run to run and on
# every rank. At 3, 4 and 5 ranks it launches tests/mr/determinism (random float32, float64 and
# bfloat16 data; every algorithm of allreduce, reduce_scatter and reduce; see determinism.c) three
# times: twice on shared memory and once with every rank its own host (TEMPO_HOST_ID=%r, TCP).
# Each rank writes a hash of every result it got; this script compares the hash files, so the
# comparison never goes through the library. TAP points, per rank count:
#   - each launch: tempo-run exits 0, every rank wrote its END line and logged (TEMPO_DEBUG=INFO)
#     the intended transport
#   - per algorithm ("allreduce/ring"): every check of the three launches passed (each case run
#     twice in a row gave equal results, close to a float64 reference)
#   - per allreduce algorithm: every rank got bitwise the same result, in each launch
#   - per algorithm: the two shm launches gave bitwise the same results, rank by rank
#   - per algorithm: the tcp launch gave the same results as the shm launches (same inputs, rank
#     count and algorithm; the transport is not part of the promise). Skipped for "auto", whose
#     choice may depend on the transport, and for algorithms that cannot run across hosts.
# Knobs: DET_RANKS ("3 4 5"), DET_BIG_BYTES (the ~1.5 MB size, 1572864; 65536 and up: determinism
# --big-bytes; 262144 cuts a ThreadSanitizer launch 5-fold), DET_TIMEOUT (per launch, 600 s),
# DET_KEEP=1 keeps the files.
# Run by the automake harness with top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/mr/determinism.sh

TR="${top_builddir:-.}/tools/tempo-run"
PROG="${top_builddir:-.}/tests/mr/determinism"
for f in "$TR" "$PROG"; do
    if [ ! -x "$f" ]; then
        echo "Bail out! $f not found or not executable (build it first: make check)"
        exit 1
    fi
done
unset TEMPO_ROOT TEMPO_RANK TEMPO_SIZE TEMPO_LOCAL_RANK TEMPO_LOCAL_SIZE TEMPO_ALGO TEMPO_SHM \
    TEMPO_HOST_ID
TEMPO_TIMEOUT=60
export TEMPO_TIMEOUT
# The INIT log says which transport each rank uses; the launch points check it.
if [ -z "${TEMPO_DEBUG:-}" ]; then
    TEMPO_DEBUG=INFO
    TEMPO_DEBUG_SUBSYS=INIT
    export TEMPO_DEBUG TEMPO_DEBUG_SUBSYS
fi

ranks=${DET_RANKS:-3 4 5}
launch_timeout=${DET_TIMEOUT:-600}
big=${DET_BIG_BYTES:+--big-bytes $DET_BIG_BYTES}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/determinism.XXXXXX") || exit 1
if [ "${DET_KEEP:-0}" = 1 ]; then
    trap 'echo "# files kept in $tmp"' EXIT
else
    trap 'rm -rf "$tmp"' EXIT
fi
trap 'exit 1' HUP INT TERM

if ! "$PROG" --list >"$tmp/groups" || [ ! -s "$tmp/groups" ]; then
    echo "Bail out! $PROG --list failed"
    exit 1
fi
groups=$(cat "$tmp/groups")
ngroups=$(wc -l <"$tmp/groups")
nallreduce=$(grep -c '^allreduce/' "$tmp/groups")
nlaunch=0
for n in $ranks; do nlaunch=$((nlaunch + 1)); done
echo "1..$((nlaunch * (3 + 3 * ngroups + nallreduce)))"

num=0
# point OK DESCRIPTION [DIAGNOSTIC-FILE]: one TAP line; on failure the file's first lines.
point() {
    num=$((num + 1))
    if [ "$1" = ok ]; then
        echo "ok $num - $2"
    elif [ "$1" = skip ]; then
        echo "ok $num - $2 # SKIP $3"
    else
        echo "not ok $num - $2"
        [ -n "$3" ] && head -n 8 "$3" | cut -c 1-300 | sed 's/^/# /'
    fi
}

# hashes LAUNCH RANK GROUP: that rank's hash lines of GROUP, sorted.
hashes() {
    awk -v g="$3" '$1 == g' "$dir/$1/h$2" 2>/dev/null | sort
}

t_start=$(date +%s)
for n in $ranks; do
    dir="$tmp/n$n"
    for launch in shm1 shm2 tcp; do
        mkdir -p "$dir/$launch" || exit 1
        t0=$(date +%s)
        if [ $launch = tcp ]; then
            # shellcheck disable=SC2086
            TEMPO_HOST_ID=%r "$TR" -n "$n" --timeout "$launch_timeout" "$PROG" $big \
                --out "$dir/$launch" >"$dir/$launch/out" 2>&1 </dev/null
        else
            # shellcheck disable=SC2086
            "$TR" -n "$n" --timeout "$launch_timeout" "$PROG" $big --out "$dir/$launch" \
                >"$dir/$launch/out" 2>&1 </dev/null
        fi
        rc=$?
        elapsed=$(($(date +%s) - t0))
        missing=
        r=0
        while [ $r -lt "$n" ]; do
            grep -q '^END ' "$dir/$launch/r$r" 2>/dev/null || missing="$missing $r"
            r=$((r + 1))
        done
        if [ $launch = tcp ]; then
            want="0 peers over shm, $((n - 1)) over tcp"
        else
            want="$((n - 1)) peers over shm, 0 over tcp"
        fi
        nlines=$(grep -c 'transports: [0-9]* peers over shm, [0-9]* over tcp' "$dir/$launch/out")
        nright=$(grep -c "transports: $want\$" "$dir/$launch/out")
        {
            echo "tempo-run exited with status $rc${missing:+; no END line from rank(s)$missing}"
            [ "$nright" -ne "$nlines" ] &&
                echo "$((nlines - nright)) rank(s) did not log 'transports: $want'"
            grep -v ' INFO ' "$dir/$launch/out" | tail -n 6
        } >"$tmp/diag"
        if [ "$rc" -eq 0 ] && [ -z "$missing" ] && [ "$nright" -eq "$nlines" ]; then
            point ok "n=$n: launch $launch of $n ranks ($elapsed s)"
        else
            point fail "n=$n: launch $launch of $n ranks ($elapsed s)" "$tmp/diag"
        fi
    done

    for g in $groups; do
        # Every check of the three launches passed, and every rank recorded some.
        awk -v g="$g" -v n="$n" '
            $1 == g {
                np = split(FILENAME, p, "/"); where = p[np - 1] " rank " substr(p[np], 2)
                if (!(where in seen)) { seen[where] = 1; nseen++ }
                if ($2 == "PASS") pass++
                else if ($2 == "SKIP") skip++
                else if ($2 == "FAIL" && nf++ < 6) print where ": " $0
            }
            END {
                if (nseen != 3 * n)
                    print "results from only " nseen + 0 " of " 3 * n " rank-launches"
                printf "%d %d\n", pass, skip > "/dev/stderr"
            }' "$dir"/shm1/r* "$dir"/shm2/r* "$dir"/tcp/r* >"$tmp/diag" 2>"$tmp/counts"
        read -r npass nskip <"$tmp/counts"
        desc="n=$n $g: all checks passed in 3 launches ($npass passed, $nskip skipped)"
        if [ -s "$tmp/diag" ]; then
            point fail "$desc" "$tmp/diag"
        elif [ "$npass" -eq 0 ]; then
            point skip "$desc" "nothing ran"
        else
            point ok "$desc"
        fi

        # allreduce: the same result on every rank, in each launch.
        case $g in
        allreduce/*)
            : >"$tmp/diag"
            for launch in shm1 shm2 tcp; do
                awk -v g="$g" -v n="$n" -v l="$launch" '
                    $1 == g {
                        c[$2]++
                        if (!($2 in h)) { h[$2] = $3; first[$2] = FILENAME }
                        else if (h[$2] != $3 && !bad[$2]++)
                            print l " " $2 ": " FILENAME " has " $3 ", " first[$2] " has " h[$2]
                    }
                    END {
                        for (k in c) if (c[k] != n) print l " " k ": only " c[k] " of " n " ranks"
                    }
                    ' "$dir/$launch"/h* | sed "s|$dir/||g" >>"$tmp/diag"
            done
            if [ -s "$tmp/diag" ]; then
                point fail "n=$n $g: bitwise the same result on every rank" "$tmp/diag"
            else
                point ok "n=$n $g: bitwise the same result on every rank"
            fi
            ;;
        esac

        # Run to run: the two shm launches, rank by rank; then tcp against shm.
        for other in shm2 tcp; do
            : >"$tmp/diag"
            empty=1
            r=0
            while [ $r -lt "$n" ]; do
                hashes shm1 $r "$g" >"$tmp/a"
                hashes $other $r "$g" >"$tmp/b"
                [ -s "$tmp/a" ] && empty=0
                if ! cmp -s "$tmp/a" "$tmp/b"; then
                    echo "rank $r: shm1 < > $other:" >>"$tmp/diag"
                    diff "$tmp/a" "$tmp/b" | grep '^[<>]' | head -n 4 >>"$tmp/diag"
                fi
                r=$((r + 1))
            done
            if [ $other = shm2 ]; then
                desc="n=$n $g: two launches give bitwise the same results on every rank"
            else
                desc="n=$n $g: a tcp launch gives bitwise the same results as shm"
            fi
            if [ $other = tcp ] && [ "${g#*/}" = auto ]; then
                point skip "$desc" "the automatic choice may depend on the transport"
            elif [ $other = tcp ] && [ -z "$(hashes tcp 0 "$g")" ] &&
                grep -q "^$g SKIP .*TEMPO_ERR_UNSUPPORTED" "$dir/tcp/r0"; then
                point skip "$desc" "$g cannot run across hosts"
            elif [ -s "$tmp/diag" ]; then
                point fail "$desc" "$tmp/diag"
            elif [ $empty = 1 ]; then
                point fail "$desc (no results at all)"
            else
                point ok "$desc"
            fi
        done
    done
    echo "# n=$n: $(($(date +%s) - t_start)) s so far"
done
echo "# determinism: all launches took $(($(date +%s) - t_start)) s"
