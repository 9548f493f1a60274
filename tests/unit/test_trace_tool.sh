#!/bin/sh
# tests/unit/test_trace_tool.sh — TAP tests of tools/tempo-trace (merge, check, summary, flight).
#
# Writes small synthetic per-rank trace files (the format of core/trace.c, documented in
# `tempo-trace -h`) into a temporary directory and checks: merge aligns two ranks whose clocks
# have different offsets, check accepts good files and names each kind of problem (unbalanced
# B/E, E with the wrong name, unmatched async b, negative dur, truncated JSON, non-numeric counter
# arg), merge refuses a duplicate rank, summary computes unions and the compute/comm overlap,
# flight lines up synthetic flight records (agreement, a laggard, a mismatch, a rank without a
# file, a call posted after the job failed, unreadable and foreign files), and
# gzip works both ways. No libtempo and no processes of tempo. POSIX sh, run by the automake
# harness with top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/unit/test_trace_tool.sh

PY=/usr/bin/python3
if [ ! -x "$PY" ]; then
    echo "1..0 # SKIP $PY not found"
    exit 0
fi
if ! "$PY" -c 'import json, gzip, argparse' 2>/dev/null; then
    echo "1..0 # SKIP $PY lacks json, gzip or argparse (install python3, not only python3-minimal)"
    exit 0
fi
TT="${top_builddir:-.}/tools/tempo-trace"
if [ ! -f "$TT" ]; then
    echo "Bail out! $TT not found (set top_builddir)"
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_trace_tool.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

echo 1..43
n=0

# tt ARGS...: tempo-trace through /usr/bin/python3; sets rc, output in out/err.
tt() {
    "$PY" "$TT" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
}

# check DESCRIPTION COMMAND...: one TAP line; on failure the last run's output as diagnostics.
check() {
    n=$((n + 1))
    desc=$1
    shift
    if "$@"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        echo "# exit status $rc; stdout, then stderr:"
        head -n 30 "$tmp/out" | cut -c 1-200 | sed 's/^/#   /'
        head -n 30 "$tmp/err" | cut -c 1-200 | sed 's/^/#   /'
    fi
}

rc_is() { [ "$rc" -eq "$1" ]; }
out_has() { grep -q -E -- "$1" "$tmp/out"; }
err_has() { grep -q -E -- "$1" "$tmp/err"; }
no_traceback() { ! grep -q Traceback "$tmp/out" "$tmp/err"; }

# trailer RANK T0_MONO T0_REAL: the end of a per-rank file, as the writer leaves it.
trailer() {
    printf '\n],\n"displayTimeUnit": "ms",\n"otherData": {"tool": "tempo", "version": "0.1.0", '
    printf '"rank": %s, "size": 2, "host": "vm", "pid": %s, "clock": "monotonic", ' "$1" "$((1000 + $1))"
    printf '"t0_monotonic_us": %s, "t0_realtime_us": %s}}\n' "$2" "$3"
}

# rankfile FILE RANK T0_MONO T0_REAL EVENTS: a per-rank file with the given event lines.
rankfile() {
    f=$1 r=$2 mono=$3 real=$4
    shift 4
    {
        printf '{"traceEvents": [\n'
        printf '%s' "$1"
        shift
        for e in "$@"; do printf ',\n%s' "$e"; done
        trailer "$r" "$mono" "$real"
    } >"$f"
}

# ---------------------------------------------------------------------------- good files
# Rank 0: offset = 1700000000000000 - 1000000 = 1699999999000000.
#   "first" at mono 1000050 (real ...000050, the earliest event: merged 0),
#   "step" at mono 1000500 (real ...000500: merged 450).
# Rank 1: offset = 1700000000000200 - 5000000 = 1699999995000200.
#   "step" at mono 5000100 (real ...000300: merged 250).
rankfile "$tmp/good.0.json" 0 1000000.0 1700000000000000.0 \
    '{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0 (host vm, pid 1000)"}}' \
    '{"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "compute"}}' \
    '{"name": "first", "cat": "compute", "ph": "X", "pid": 0, "tid": 1, "ts": 1000050.0, "dur": 10.0, "args": {}}' \
    '{"name": "fwd", "cat": "compute", "ph": "B", "pid": 0, "tid": 1, "ts": 1000100.0}' \
    '{"name": "inner", "cat": "compute", "ph": "B", "pid": 0, "tid": 1, "ts": 1000110.0}' \
    '{"name": "inner", "cat": "compute", "ph": "E", "pid": 0, "tid": 1, "ts": 1000120.0}' \
    '{"name": "fwd", "cat": "compute", "ph": "E", "pid": 0, "tid": 1, "ts": 1000200.0}' \
    '{"name": "queued allreduce tag 5", "cat": "queue", "ph": "b", "id": "5:0", "pid": 0, "tid": 10, "ts": 1000300.0, "args": {"tag": 5}}' \
    '{"name": "queued allreduce tag 5", "cat": "queue", "ph": "e", "id": "5:0", "pid": 0, "tid": 10, "ts": 1000400.0}' \
    '{"name": "step", "cat": "comm", "ph": "X", "pid": 0, "tid": 10, "ts": 1000500.0, "dur": 100.0, "args": {"bytes": 4096}}' \
    '{"name": "bytes in flight", "ph": "C", "pid": 0, "tid": 0, "ts": 1000500.0, "args": {"value": 4096}}' \
    '{"name": "mark", "ph": "i", "s": "t", "pid": 0, "tid": 3, "ts": 1000550.0}'
# Rank 1 has no process_name: merge adds one.
rankfile "$tmp/good.1.json" 1 5000000.0 1700000000000200.0 \
    '{"name": "thread_name", "ph": "M", "pid": 1, "tid": 10, "args": {"name": "comm slot 0"}}' \
    '{"name": "queued allreduce tag 5", "cat": "queue", "ph": "b", "id": "5:0", "pid": 1, "tid": 10, "ts": 5000090.0}' \
    '{"name": "queued allreduce tag 5", "cat": "queue", "ph": "e", "id": "5:0", "pid": 1, "tid": 10, "ts": 5000095.0}' \
    '{"name": "step", "cat": "comm", "ph": "X", "pid": 1, "tid": 10, "ts": 5000100.0, "dur": 50.5}'

tt check "$tmp/good.0.json" "$tmp/good.1.json"
check "check passes on two good per-rank files" \
    eval 'rc_is 0 && out_has "good\.0\.json: ok \(12 events, 3 tracks, span 0\.000550 s\)$" &&
        out_has "good\.1\.json: ok \(4 events, 1 tracks, span 0\.0000[0-9]+ s\)$"'

# ---------------------------------------------------------------------------- merge
tt merge -o "$tmp/all.json" "$tmp/good.1.json" "$tmp/good.0.json"
check "merge of 2 ranks succeeds and prints its one-line summary" \
    eval 'rc_is 0 && err_has "^merged 2 ranks, 17 events, 0\.000550 s -> .*/all\.json$"'

# evq EXPR: true if the python expression EXPR holds for all.json (d: the file, ev: its events,
# by(name, pid): the first such event).
evq() {
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
def by(name, pid):
    return [e for e in ev if e["name"] == name and e["pid"] == pid][0]
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$tmp/all.json" "$1" 2>"$tmp/err"
}
check "aligned: rank 0 \"first\" at 0, rank 1 \"step\" at 250, rank 0 \"step\" at 450 us" \
    evq 'by("first", 0)["ts"] == 0 and by("step", 1)["ts"] == 250 and by("step", 0)["ts"] == 450'
check "durations kept, B/E and async events shifted by the same offset" \
    evq 'by("step", 1)["dur"] == 50.5 and by("fwd", 0)["ts"] == 50 and
        [e["ts"] for e in ev if e["ph"] == "b"] == [240, 250]'
check "M events first, then all others sorted by ts" \
    evq 'all(e["ph"] == "M" for e in ev[:4]) and all(e["ph"] != "M" for e in ev[4:]) and
        [e["ts"] for e in ev[4:]] == sorted(e["ts"] for e in ev[4:])'
check "process_name \"rank 1 (host vm, pid 1001)\" added; rank 0 keeps its own only" \
    evq '[e["args"]["name"] for e in ev if e["name"] == "process_name"] ==
        ["rank 0 (host vm, pid 1000)", "rank 1 (host vm, pid 1001)"]'
check "otherData: tool \"tempo-trace merge\", the ranks' otherData by rank" \
    evq 'd["otherData"]["tool"] == "tempo-trace merge" and d["displayTimeUnit"] == "ms" and
        [o["rank"] for o in d["otherData"]["ranks"]] == [0, 1]'
tt check "$tmp/all.json"
check "check passes on the merged file" eval 'rc_is 0 && out_has "all\.json: ok \(17 events"'

cp "$tmp/all.json" "$tmp/all.list.json"
tt merge -o "$tmp/all.json" -n 2 "$tmp/good.%r.json"
check "merge -n 2 good.%r.json gives the same file as the explicit list" \
    eval 'rc_is 0 && cmp -s "$tmp/all.json" "$tmp/all.list.json"'

tt merge -o "$tmp/x.json" "$tmp/good.%r.json"
check "a %r pattern without -n is a usage error (exit 2)" eval 'rc_is 2 && err_has "-n N"'
tt merge "$tmp/good.0.json"
check "merge without -o is a usage error (exit 2)" eval 'rc_is 2 && err_has "usage"'

cp "$tmp/good.0.json" "$tmp/dup.json"
tt merge -o "$tmp/x.json" "$tmp/good.0.json" "$tmp/good.1.json" "$tmp/dup.json"
check "duplicate rank: merge fails (exit 1) naming both files" \
    eval 'rc_is 1 && err_has "good\.0\.json and .*dup\.json both claim rank 0" &&
        [ ! -e "$tmp/x.json" ]'
tt merge -o "$tmp/x.json" "$tmp/all.list.json"
check "a merged file is refused as merge input" eval 'rc_is 1 && err_has "already a merged trace"'

# ---------------------------------------------------------------------------- check: problems
M='{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0"}}'
rankfile "$tmp/unbal.json" 0 0.0 1.0 "$M" \
    '{"name": "fwd", "cat": "compute", "ph": "B", "pid": 0, "tid": 1, "ts": 10.0}' \
    '{"name": "bwd", "cat": "compute", "ph": "B", "pid": 0, "tid": 2, "ts": 20.0}' \
    '{"name": "bwd", "cat": "compute", "ph": "E", "pid": 0, "tid": 2, "ts": 30.0}' \
    '{"name": "bwd", "cat": "compute", "ph": "E", "pid": 0, "tid": 2, "ts": 40.0}'
tt check "$tmp/unbal.json"
check "unbalanced B/E: B never closed and E without B, exit 1" \
    eval 'rc_is 1 && out_has "unbal\.json: 2 problems" && out_has "B \"fwd\" .* never closed" &&
        out_has "E \"bwd\" has no open B"'

rankfile "$tmp/wrongname.json" 0 0.0 1.0 "$M" \
    '{"name": "fwd", "cat": "compute", "ph": "B", "pid": 0, "tid": 1, "ts": 10.0}' \
    '{"name": "bwd", "cat": "compute", "ph": "E", "pid": 0, "tid": 1, "ts": 20.0}'
tt check "$tmp/wrongname.json"
check "E with the wrong name is named, exit 1" \
    eval 'rc_is 1 && out_has "E \"bwd\" does not match the most recent open B \"fwd\""'

rankfile "$tmp/async.json" 0 0.0 1.0 "$M" \
    '{"name": "queued x", "cat": "queue", "ph": "b", "id": 7, "pid": 0, "tid": 10, "ts": 10.0}' \
    '{"name": "queued x", "cat": "queue", "ph": "e", "id": 8, "pid": 0, "tid": 10, "ts": 20.0}'
tt check "$tmp/async.json"
check "unmatched async b (and e with another id) named, exit 1" \
    eval 'rc_is 1 && out_has "async b \(cat \"queue\", id 7, name \"queued x\"\) .*no matching e" &&
        out_has "async e \(cat \"queue\", id 8.*no matching b"'

rankfile "$tmp/negdur.json" 0 0.0 1.0 "$M" \
    '{"name": "op", "cat": "comm", "ph": "X", "pid": 0, "tid": 10, "ts": 10.0, "dur": -5.0}'
tt check "$tmp/negdur.json"
check "negative dur named, exit 1" eval 'rc_is 1 && out_has "\"dur\" is negative \(-5\)"'

rankfile "$tmp/counter.json" 0 0.0 1.0 "$M" \
    '{"name": "bytes in flight", "ph": "C", "pid": 0, "tid": 0, "ts": 10.0, "args": {"value": "lots"}}'
tt check "$tmp/counter.json"
check "non-numeric counter arg named, exit 1" \
    eval 'rc_is 1 && out_has "arg \"value\" is not a number \(\"lots\"\)"'

size=$(wc -c <"$tmp/good.0.json")
head -c $((size / 2)) "$tmp/good.0.json" >"$tmp/cut.json"
tt check "$tmp/cut.json"
check "truncated JSON: exit 1, position and 'cut short', no traceback" \
    eval 'rc_is 1 && out_has "cut\.json: not valid JSON: .* at line [0-9]+ column [0-9]+ \(character [0-9]+ of [0-9]+\).*cut short" &&
        no_traceback'
tt merge -o "$tmp/x.json" "$tmp/cut.json" "$tmp/good.1.json"
check "merge of a truncated file fails with the same message, no traceback" \
    eval 'rc_is 1 && err_has "cut\.json: not valid JSON: .*cut short" && no_traceback'

i=0
set -- "$M"
while [ $i -lt 25 ]; do
    set -- "$@" "{\"name\": \"op$i\", \"cat\": \"comm\", \"ph\": \"X\", \"pid\": 0, \"tid\": 10, \"ts\": $i, \"dur\": -1}"
    i=$((i + 1))
done
rankfile "$tmp/many.json" 0 0.0 1.0 "$@"
tt check "$tmp/many.json"
check "at most 20 problems listed, then '... and 5 more'" \
    eval 'rc_is 1 && [ "$(grep -c "is negative" "$tmp/out")" -eq 20 ] && out_has "^  \.\.\. and 5 more$"'

tt check "$tmp/good.0.json" "$tmp/negdur.json"
check "a good and a bad file: the good one ok, exit 1" \
    eval 'rc_is 1 && out_has "good\.0\.json: ok" && out_has "negdur\.json: 1 problem "'
tt check "$tmp/no-such-file.json"
check "an unreadable file: exit 2 with a clear message" \
    eval 'rc_is 2 && out_has "no-such-file\.json: cannot read: No such file or directory"'
printf '[1, 2]\n' >"$tmp/notobj.json"
tt check "$tmp/notobj.json"
check "a JSON array is not a trace (exit 1)" eval 'rc_is 1 && out_has "not an object"'

# ---------------------------------------------------------------------------- summary
# compute [0,10] and [5,15] us, comm [12,20]: compute 15 us, comm 8 us, overlap [12,15] = 3 us.
rankfile "$tmp/sum.json" 0 0.0 1.0 "$M" \
    '{"name": "a", "cat": "compute", "ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": 10.0}' \
    '{"name": "b", "cat": "compute", "ph": "X", "pid": 0, "tid": 1, "ts": 5.0, "dur": 10.0}' \
    '{"name": "c", "cat": "comm", "ph": "X", "pid": 0, "tid": 10, "ts": 12.0, "dur": 8.0}'
tt summary --unit us "$tmp/sum.json"
check "summary: compute 15 us (2 spans), comm 8 us (1 span), overlap 3 us" \
    eval 'rc_is 0 && out_has "^rank 0: compute 15\.000 us \(2 spans\), comm 8\.000 us \(1 span\), overlap compute.comm 3\.000 us$"'

# The same spans as B/E pairs on rank 1, comm as X; auto units.
rankfile "$tmp/sumbe.json" 1 0.0 1.0 \
    '{"name": "a", "cat": "compute", "ph": "B", "pid": 1, "tid": 1, "ts": 0.0}' \
    '{"name": "a", "cat": "compute", "ph": "E", "pid": 1, "tid": 1, "ts": 10.0}' \
    '{"name": "b", "cat": "compute", "ph": "B", "pid": 1, "tid": 2, "ts": 5.0}' \
    '{"name": "b", "cat": "compute", "ph": "E", "pid": 1, "tid": 2, "ts": 15.0}' \
    '{"name": "c", "cat": "comm", "ph": "X", "pid": 1, "tid": 10, "ts": 12.0, "dur": 2000.0}'
tt summary "$tmp/sumbe.json"
check "summary counts matched B/E pairs as spans; auto units" \
    eval 'rc_is 0 && out_has "^rank 1: compute 15\.000 us \(2 spans\), comm 2\.000 ms \(1 span\), overlap compute.comm 3\.000 us$"'

# ---------------------------------------------------------------------------- gzip
gzip -c "$tmp/good.0.json" >"$tmp/good.0.json.gz"
gzip -c "$tmp/good.1.json" >"$tmp/good.1.json.gz"
tt check "$tmp/good.0.json.gz"
check "check reads a gzip-compressed file" eval 'rc_is 0 && out_has "good\.0\.json\.gz: ok \(12 events"'
tt merge -o "$tmp/allgz.json.gz" -n 2 "$tmp/good.%r.json.gz"
check "merge reads .gz inputs and writes a .gz output" \
    eval 'rc_is 0 && gzip -dc "$tmp/allgz.json.gz" | cmp -s - "$tmp/all.list.json"'
tt check "$tmp/allgz.json.gz"
check "check passes on the gzip-compressed merged file" eval 'rc_is 0 && out_has "ok \(17 events"'
size=$(wc -c <"$tmp/allgz.json.gz")
head -c $((size / 2)) "$tmp/allgz.json.gz" >"$tmp/cut.json.gz"
tt check "$tmp/cut.json.gz"
check "a truncated gzip file: exit 1, 'cut short', no traceback" \
    eval 'rc_is 1 && out_has "cut\.json\.gz: .*cut short" && no_traceback'

# ---------------------------------------------------------------------------- flight
# Synthetic flight records (the format of core/flight.c, `tempo-trace flight -h`): case/rank.json.
"$PY" - "$tmp" <<'PYEOF'
import json, os, sys
tmp = sys.argv[1]

def ent(seq, state, count=8, dtype="float32", wait=(), post=None, coll="allreduce"):
    t = 1000.0 + 10 * seq if post is None else post
    e = {"id": seq + 1, "seq": seq, "lane": "program", "coll": coll, "count": count,
         "dtype": dtype, "op": "sum", "root": -1, "algorithm": "ring", "compressor": None,
         "state": state, "status": None, "t_post_us": t, "t_start_us": t,
         "waiting_for": list(wait)}
    if state in ("done", "failed"):
        e["t_end_us"] = t + 5
    return e

def write(case, rank, size, entries, failed_at=None, reason="timeout"):
    os.makedirs(os.path.join(tmp, case), exist_ok=True)
    job = {"failed": None, "message": None}
    if failed_at is not None:
        job = {"failed": "TEMPO_ERR_TIMEOUT", "message": "timed out", "t_failed_us": failed_at}
    doc = {"tool": "tempo", "kind": "flight_recorder", "format": 1, "version": "0",
           "reason": reason, "rank": rank, "size": size, "host": "h", "pid": 100 + rank,
           "clock": "monotonic", "t_dump_us": 9000.0, "t0_monotonic_us": 0.0,
           "t0_realtime_us": 5e15, "timeout_s": 3,
           "job": job, "engine": {"running_ops": 0, "parked_ops": 0, "bytes_in_flight": 0,
                                  "progress_passes": 1, "progress_thread": True,
                                  "callers_waiting": 1},
           "peers": [{"rank": r, "host": "h", "pid": 100 + r, "transport": "shm",
                      "left": False} for r in range(size)],
           "comms": [{"id": "00000000000000aa", "ctx": 0, "size": size, "rank": rank,
                      "ranks": list(range(size)), "next_seq": 0, "failed": None,
                      "message": None, "scheduler": None, "recorder_size": 64,
                      "recorded": len(entries), "entries": entries}]}
    with open(os.path.join(tmp, case, "%d.json" % rank), "w") as f:
        json.dump(doc, f)

done = lambda a, b: [ent(s, "done") for s in range(a, b)]
for r in range(3):   # the same calls everywhere, rank 1's ring starting later (wrapped)
    write("agree", r, 3, done(5 if r == 1 else 0, 12), reason="signal")
for r in range(3):   # rank 1 never called #3; 0 and 2 wait for it there
    write("lag", r, 3, done(0, 3) + ([] if r == 1 else [ent(3, "running", wait=[1])]))
for r in range(3):   # rank 2 called #3 with float64
    write("dtype", r, 3, done(0, 3) + [ent(3, "failed", dtype="float64" if r == 2 else
                                          "float32")], reason="failure")
# rank 2 died: rank 0 had finished #3 and failed in #4, rank 1 failed in #3 (waiting for rank 0)
write("dead", 0, 3, done(0, 4) + [ent(4, "failed", wait=[2])], failed_at=1045.0)
write("dead", 1, 3, done(0, 3) + [ent(3, "failed", wait=[0])], failed_at=1045.0)
# two communicators: the job's agrees; in a split of ranks 0 and 2, rank 2 never called #1
for r in range(3):
    write("split", r, 3, done(0, 4))
    if r != 1:
        with open(os.path.join(tmp, "split", "%d.json" % r)) as f:
            doc = json.load(f)
        sp = dict(doc["comms"][0], id="00000000000000bb", size=2, rank=r // 2, ranks=[0, 2],
                  entries=done(0, 1) + ([] if r == 2 else [ent(1, "running", wait=[2])]))
        doc["comms"].append(sp)
        with open(os.path.join(tmp, "split", "%d.json" % r), "w") as f:
            json.dump(doc, f)
# rank 1 called #3 only after rank 0 had failed the job (its file written later)
write("late", 0, 2, done(0, 3) + [ent(3, "failed", wait=[1])], failed_at=2000.0)
write("late", 1, 2, done(0, 3) + [ent(3, "failed", post=2500.0)], failed_at=2600.0)
PYEOF
fl() { tt flight "$tmp/$1"/*.json; }
fl agree
check "flight: the same calls on every rank (rings wrapped differently): exit 0" \
    eval 'rc_is 0 && out_has "consistent: every rank posted and completed" && out_has "allreduce #11 "'
fl lag
check "flight: a rank that never called #3 is behind there: exit 1" \
    eval 'rc_is 1 && out_has "BEHIND: rank 1 did not reach allreduce #3 " && out_has "ranks 0, 2 posted it" && out_has "last program operation completed by every rank with a file: allreduce #2 "'
fl dtype
check "flight: another dtype at #3 is a mismatch naming the rank" \
    eval 'rc_is 1 && out_has "MISMATCH at program #3: dtype float64 on rank 2, float32 on ranks 0, 1"'
fl dead
check "flight: a rank without a file is behind, not the one whose call failed earlier" \
    eval 'rc_is 1 && out_has "BEHIND: rank 2 wrote no file" && ! out_has "rank 1 did not reach"'
fl split
check "flight: each communicator apart: the split's laggard, the job's agreement" \
    eval 'rc_is 1 && out_has "communicator 00000000000000bb \(size 2, world ranks 0, 2\)" && out_has "BEHIND: rank 2 did not reach allreduce #1 " && out_has "consistent: every rank posted"'
fl late
check "flight: a call posted after the job had failed does not count" \
    eval 'rc_is 1 && out_has "BEHIND: rank 1 did not reach allreduce #3 " && out_has "only after the job had failed"'
tt flight "$tmp/agree/0.json" "$tmp/nosuch.json"
check "flight: a file that cannot be read: exit 2" eval 'rc_is 2 && err_has "nosuch.json: cannot read" && no_traceback'
echo '{"traceEvents": []}' >"$tmp/trace.json"
tt flight "$tmp/trace.json"
check "flight: a trace file is not a flight record: exit 1" eval 'rc_is 1 && err_has "not a flight record" && no_traceback'
tt flight "$tmp/agree/0.json" "$tmp/agree/0.json"
check "flight: the same rank twice: exit 2" eval 'rc_is 2 && err_has "both rank 0"'
tt flight -h
check "flight -h documents the verdict, the exit status and the file format" \
    eval 'rc_is 0 && out_has "Exit status: 0 the ranks agree" && out_has "waiting_for" && out_has "t0_realtime_us"'

# ---------------------------------------------------------------------------- help
help_documents_all() {
    for w in merge check summary traceEvents otherData t0_monotonic_us t0_realtime_us \
        CLOCK_MONOTONIC displayTimeUnit '"ph"' .gz; do
        grep -q -F -- "$w" "$tmp/out" || return 1
    done
}
tt -h
check "-h documents the commands and the file format" eval 'rc_is 0 && help_documents_all'
help_subs() {
    for c in merge check summary; do
        tt "$c" -h
        rc_is 0 && grep -q -F t0_monotonic_us "$tmp/out" || return 1
    done
    tt merge -h
    grep -q -F -- "-n N" "$tmp/out" && grep -q -F "offset = t0_realtime_us - t0_monotonic_us" "$tmp/out"
}
check "each command's -h documents it and the file format" help_subs
check "tools/tempo-trace is executable and starts with #!/usr/bin/python3" \
    eval '[ -x "$TT" ] && [ "$(head -n 1 "$TT")" = "#!/usr/bin/python3" ]'
