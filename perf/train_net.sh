#!/bin/sh
# train_net.sh — tempo-train across emulated hosts: builds HOSTS network namespaces with links shaped
# to RATE (perf/netns-run, tc tbf), trains the same model with each gradient sync configuration
# (uncompressed and ALQ 3-bit, each with the tic and the fifo order) in interleaved rounds, and
# prints each configuration's step time split (the median over rounds of each run's mean), then
# tears the topology down. Needs root; exits 77 saying so otherwise.
#
#   perf/train_net.sh [-H HOSTS] [-r RATE] [-R ROUNDS] [-c "CONFIG;..."] [-x NAME=VALUE]...
#                     [-- tempo-train flags]
#
# Defaults: 2 hosts, 100mbit, 3 rounds, configs "none tic;none fifo;alq:bits=3 tic;alq:bits=3
# fifo" (each "COMPRESS SCHED"), and the tempo-train flags --steps 30 --val-every 0 --sample 0
# --clip 0 --bucket-bytes 256K (per-layer updates and a bucket per layer, so that the order can
# matter); flags after -- are added to those. tempo-train is looked up beside this script
# (../trainer/tempo-train in the build tree), then on PATH. -x sets a variable for every rank
# (e.g. -x TEMPO_CREDIT_BYTES=512K).
set -u
hosts=2
rate=100mbit
rounds=3
configs="none tic;none fifo;alq:bits=3 tic;alq:bits=3 fifo"
xs=""
while [ $# -gt 0 ]; do
    case $1 in
    -H) hosts=$2; shift 2 ;;
    -r) rate=$2; shift 2 ;;
    -R) rounds=$2; shift 2 ;;
    -c) configs=$2; shift 2 ;;
    -x) xs="$xs -x $2"; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "train_net.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
here=$(dirname "$0")
netns="$here/netns-run"
[ -x "$netns" ] || netns=netns-run
tt="$here/../trainer/tempo-train"
[ -x "$tt" ] || tt=$(command -v tempo-train) ||
    { echo "train_net.sh: tempo-train not found (make, or put it on PATH)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train_net.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

echo "# $hosts hosts at $rate;${xs:+$xs;} $rounds rounds; tempo-train --steps 30 --val-every 0 --sample 0" \
    "--clip 0 --bucket-bytes 256K $*"
status=0
r=0
while [ $r -lt "$rounds" ]; do
    r=$((r + 1))
    i=0
    echo "$configs" | tr ';' '\n' >"$tmp/configs"
    while read -r comp sched; do
        [ -n "$comp" ] || continue
        i=$((i + 1))
        out="$tmp/run$i.$r"
        # netns-run checks for root (exit 77); -0: rank 0's report only
        # shellcheck disable=SC2086 # $xs is a word list
        "$netns" -0 -H "$hosts" -r "$rate" $xs -- "$tt" --steps 30 --val-every 0 --sample 0 --quiet \
            --clip 0 --bucket-bytes 256K --compress "$comp" --sched "$sched" --out "$out" "$@" \
            >"$out.log" 2>&1 </dev/null
        rc=$?
        if [ $rc -eq 77 ]; then
            cat "$out.log" >&2
            exit 77
        fi
        # "step time, mean of steps 2-30: S ms = compute C + exposed communication E (P %); T
        #  tokens/s; sent B MB per step"
        line=$(grep "^step time" "$out.log")
        if [ $rc -ne 0 ] || [ -z "$line" ]; then
            echo "# round $r, $comp $sched: failed (exit $rc):" >&2
            tail -n 5 "$out.log" | sed 's/^/#   /' >&2
            status=1
            continue
        fi
        printf '%s\n' "$line" |
            sed 's/.*: \([0-9.]*\) ms = compute \([0-9.]*\) + exposed communication \([0-9.]*\) (.*); \([0-9]*\) tokens\/s; sent \([0-9.]*\) MB.*/\1 \2 \3 \4 \5/' |
            sed "s|^|$i $comp $sched |" >>"$tmp/rows"
        echo "# round $r: $comp $sched: $(printf '%s\n' "$line" | cut -d: -f2-)"
    done <"$tmp/configs"
done
[ -s "$tmp/rows" ] || exit 1
# per configuration: the median over rounds of each column
printf '%-14s %-5s %9s %9s %9s %9s %9s\n' compress sched "step ms" compute "exposed" "tok/s" \
    "MB sent"
sort -n -k1,1 -k4,4n "$tmp/rows" | awk '
    function flush() {
        if (n == 0) return
        m = int((n + 1) / 2)
        printf "%-14s %-5s %9.1f %9.1f %9.1f %9.0f %9.2f\n", c, s, st[m], cp[m], ex[m], tk[m], mb[m]
    }
    $1 != id { flush(); id = $1; c = $2; s = $3; n = 0 }
    { n++; st[n] = $4; cp[n] = $5; ex[n] = $6; tk[n] = $7; mb[n] = $8 }
    END { flush() }'
echo "# each row: the run with the median step time of its configuration"
exit $status
