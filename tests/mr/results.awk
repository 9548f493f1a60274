# tests/mr/results.awk — turns multi-rank result files into TAP points, one per check group.
#
# Input: first the file listing the groups in order (one name per line), then the ranks' result
# files (FILE names ending in r<rank>, lines "GROUP STATUS DETAIL", see mrtest.h). Variables:
#   n       ranks of the launch          tr      label printed before each point ("shm", "tcp")
#   num     TAP number of the last point printed so far
#   strict  1: a check refused with TEMPO_ERR_UNSUPPORTED counts as a failure (every algorithm
#           can run on one host); at n = 1 it always counts (every algorithm runs on one rank)
# A group passes when every rank wrote the same number of checks for it and none failed.
FILENAME == ARGV[1] { order[++ng] = $1; next }
{
    rank = substr(FILENAME, match(FILENAME, /r[0-9]+$/) + 1) + 0
    if ($1 == "END") next
    g = $1; st = $2
    cnt[g, rank]++
    if (st == "PASS") pass[g]++
    else if (st == "FAIL") {
        fail[g]++
        if (nd[g]++ < 4) diag[g, nd[g]] = "rank " rank ": " $0
    }
    else if (st == "SKIP") {
        skip[g]++
        if (index($0, "TEMPO_ERR_UNSUPPORTED")) {
            libskip[g]++
            if ((strict || n == 1) && nd[g]++ < 4)
                diag[g, nd[g]] = "rank " rank ": " $0
        }
        if (!(g in why)) {
            w = $0; sub(/^[^ ]+ SKIP /, "", w); sub(/^.*TEMPO_ERR_UNSUPPORTED: /, "", w)
            gsub(/#/, " ", w)
            why[g] = substr(w, 1, 160)
        }
    }
}
END {
    for (i = 1; i <= ng; i++) {
        g = order[i]; num++
        bad = ""; absent = ""; uneven = 0
        for (r = 0; r < n; r++) {
            if (!cnt[g, r]) absent = absent " " r
            else if (cnt[g, r] != cnt[g, 0]) uneven = 1
        }
        if (fail[g]) bad = fail[g] " check(s) failed"
        else if (absent != "") bad = "no result from rank(s)" absent
        else if (uneven) bad = "the ranks recorded different numbers of checks"
        else if ((strict || n == 1) && libskip[g])
            bad = libskip[g] " check(s) refused with TEMPO_ERR_UNSUPPORTED on one host" (n == 1 ? " (one rank)" : "")
        desc = tr " n=" n " " g ": " pass[g] + 0 " passed, " skip[g] + 0 " skipped"
        desc = desc " (all ranks)"
        if (bad != "") {
            print "not ok " num " - " desc
            print "# " bad
            for (k = 1; k <= nd[g] && k <= 4; k++)
                print "#   " substr(diag[g, k], 1, 400)
            if (nd[g] > 4) print "#   ... " nd[g] - 4 " more"
        } else if (!pass[g] && skip[g]) {
            print "ok " num " - " desc " # SKIP " why[g]
        } else {
            print "ok " num " - " desc
        }
    }
}
