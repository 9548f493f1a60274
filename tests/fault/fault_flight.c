/*
 * fault_flight.c — the flight recorder (issue 30): each rank's file, and `tempo-trace flight`
 * naming the rank that is behind, or the call where the ranks disagree.
 *
 *   stuck      3 ranks (TEMPO_TIMEOUT=2s) run 4 all-reduces (#0..#3); rank 2 then stops calling
 *              (it waits for the test outside tempo), so ranks 0 and 1 time out in #4 and write
 *              their files. Rank 2 writes none (no call of tempo runs in it): the tool, given the
 *              two files, must name rank 2 as behind at allreduce #4 (exit 1). SIGUSR1 makes rank
 *              2's progress thread write its file: the tool then says it was done with #3 and
 *              outside tempo. Then rank 2
 *              goes on: its #4 or #5 fails (the job failed), it writes its file late, and the
 *              tool given all three files must still name rank 2 at #4 (its #4 was posted after
 *              the job had failed).
 *   killed     the same, but the test kills rank 2 (SIGKILL) before #4: ranks 0 and 1 fail with
 *              TEMPO_ERR_REMOTE, write their files, and the tool names rank 2 at allreduce #4
 *              (or #3: rank 2 may finish #3 and die while the others are still in it).
 *   mismatch   3 ranks; in #3 rank 1 passes another count: every rank's call fails, each writes
 *              its file (a communicator's failure), and the tool reports a mismatch of the count
 *              at #3, naming rank 1 (exit 1).
 *   signal     2 ranks run all-reduces and 3 scheduled ones (priorities), raise SIGUSR1 and run
 *              one more all-reduce: the engine writes the file during that call (reason
 *              "signal"); with TEMPO_FLIGHT_RECORDER_AT_EXIT=1 the destruction of the
 *              communicator rewrites it (reason "exit"), and the tool says the ranks agree, in
 *              both lanes (exit 0).
 *   links      another user's symbolic links planted where the ranks write (as root, links owned by
 *              uid 65534), pointing at a victim file: at the dump's temporary name (the signal
 *              case's fr.R.json.tmp), the dumps land in fresh regular files; at a TEMPO_TRACE path,
 *              init fails with TEMPO_ERR_SYSTEM naming the path; the victim is never written.
 * Files go to a fresh directory under $TMPDIR, removed at the end. The only time limits are hang
 * guards (and TEMPO_TIMEOUT, which makes the survivors of the stuck case give up).
 */
#include "config.h"

#include <sys/stat.h>
#include <tempo.h>

#include "tests/fault/job.h"

#define COUNT 1024
#define GUARD_S 30.0

static char dir[256];

static int tool_rc; /* the last run_tool's exit status */

/* Run `tempo-trace flight` on the given ranks' files; returns its output (static), sets tool_rc. */
static const char *run_tool(const int *ranks, int n)
{
    static char out[16384];
    char cmd[2048];
    const char *top = getenv("top_builddir");
    int o =
        snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tools/tempo-trace flight", top ? top : ".");
    for (int i = 0; i < n; i++) {
        o += snprintf(cmd + o, sizeof(cmd) - (size_t)o, " %s/fr.%d.json", dir, ranks[i]);
    }
    snprintf(cmd + o, sizeof(cmd) - (size_t)o, " 2>&1");
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    out[got] = '\0';
    int st = p ? pclose(p) : -1;
    tool_rc = st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    static char copy[sizeof(out)];
    for (char *line = strtok(strcpy(copy, out), "\n"); line; line = strtok(NULL, "\n")) {
        tap_diag("  %s", line);
    }
    return out;
}

static int file_exists(int rank)
{
    char path[320];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/fr.%d.json", dir, rank);
    return stat(path, &sb) == 0;
}

/* The file's "reason", or "" (a small scan: the writer puts it on the first line). */
static const char *file_reason(int rank)
{
    static char reason[32];
    char path[320], line[512];
    snprintf(path, sizeof(path), "%s/fr.%d.json", dir, rank);
    FILE *f = fopen(path, "r");
    reason[0] = '\0';
    if (f && fgets(line, sizeof(line), f)) {
        const char *r = strstr(line, "\"reason\": \"");
        if (r) {
            sscanf(r + 11, "%31[a-z]", reason);
        }
    }
    if (f) {
        fclose(f);
    }
    return reason;
}

/* Whether rank's file contains needle. */
static int file_has(int rank, const char *needle)
{
    static char text[1 << 16];
    char path[320];
    snprintf(path, sizeof(path), "%s/fr.%d.json", dir, rank);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    text[n] = '\0';
    if (f) {
        fclose(f);
    }
    return strstr(text, needle) != NULL;
}

typedef struct {
    int mode; /* 0 stuck, 1 mismatch, 2 signal, 3 killed */
} flight_arg_t;

/* Three scheduled all-reduces with priorities (the scheduled lane's chunks in the ring). */
static tempo_status_t scheduled_batch(tempo_comm_t comm, float *in, float *out)
{
    tempo_request_t req[3];
    tempo_status_t stv[3];
    for (int i = 0; i < 3; i++) {
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG,
                           .priority = 2 - i,
                           .tag = (uint64_t)(100 + i)};
        tempo_status_t st = tempo_iallreduce(comm, in + i * 300, out + i * 300, 300, TEMPO_FLOAT32,
                                             TEMPO_SUM, &at, &req[i]);
        if (st != TEMPO_OK) {
            (void)tempo_waitall((size_t)i, req, stv);
            return st;
        }
    }
    return tempo_waitall(3, req, stv);
}

static int flight_rank(int rank, int size, void *arg)
{
    (void)size;
    const flight_arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    float in[COUNT + 1], out[COUNT + 1];
    for (int i = 0; i <= COUNT; i++) {
        in[i] = 1.0f;
    }
    tempo_status_t st = TEMPO_OK;
    for (int iter = 0; iter < 6 && st == TEMPO_OK; iter++) {
        if ((a->mode == 0 || a->mode == 3) && rank == 2 && iter == 4) {
            rk_put("stuck", "%d", iter);
            rk_wait_go(); /* outside tempo until the survivors have reported */
        }
        if (a->mode == 2 && iter == 2) {
            st = scheduled_batch(comm, in, out);
        }
        if (a->mode == 2 && iter == 3) {
            raise(SIGUSR1); /* only counted; the engine writes the file during the next call */
        }
        size_t n = a->mode == 1 && rank == 1 && iter == 3 ? COUNT + 1 : COUNT;
        st = tempo_allreduce(comm, in, out, n, TEMPO_FLOAT32, TEMPO_SUM);
        if (a->mode == 1 && iter == 3) {
            break;
        }
    }
    rk_put("msg", "%s", st == TEMPO_OK ? "" : tempo_last_error(comm));
    rk_put("status", "%d", (int)st);
    rk_wait_go();
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    return 0;
}

static void clear_files(int n);

/* Start n ranks of flight_rank in mode, with TEMPO_TIMEOUT=2s, TEMPO_FLIGHT_RECORDER and extra;
 * the files of an earlier case removed first. */
static job_t *start(const char *name, int n, const char *const *extra, int mode)
{
    static char fr[320];
    static flight_arg_t a;
    a.mode = mode;
    clear_files(n);
    const char *env[8] = {"TEMPO_TIMEOUT=2s", fr};
    int k = 2;
    snprintf(fr, sizeof(fr), "TEMPO_FLIGHT_RECORDER=%s/fr.%%r.json", dir);
    for (; extra && *extra && k < 7; extra++) {
        env[k++] = *extra;
    }
    env[k] = NULL;
    job_t *j = calloc(1, sizeof(*j));
    if (job_start(j, n, env, flight_rank, &a) != 0) {
        TAP_OK(0, "%s: start %d ranks", name, n);
        free(j);
        return NULL;
    }
    return j;
}

static void clear_files(int n)
{
    for (int r = 0; r < n; r++) {
        char path[320];
        snprintf(path, sizeof(path), "%s/fr.%d.json", dir, r);
        unlink(path);
    }
}

/* Rank r reported status, and wrote its file for reason. */
static void reported(job_t *j, const char *name, int r, tempo_status_t status, const char *reason)
{
    job_wait_key(j, r, "status", GUARD_S);
    TAP_EQ_INT(job_status_of(j, r, "status"), status, "%s: rank %d: %s", name, r,
               tempo_status_name(status));
    TAP_OK(file_exists(r), "%s: rank %d wrote its file", name, r);
    TAP_EQ_STR(file_reason(r), reason, "%s: rank %d's file says why", name, r);
}

static const int survivors[] = {0, 1}, all[] = {0, 1, 2};

/* tempo-trace flight on all three files names rank 2 as behind at #4 (exit 1); its output. */
static const char *all_say_behind(const char *name, const char *which)
{
    const char *out = run_tool(all, 3);
    TAP_EQ_INT(tool_rc, 1, "%s: tempo-trace flight %s exits 1", name, which);
    TAP_CONTAINS(out, "BEHIND: rank 2 did not reach allreduce #4 ",
                 "%s: %s, it names rank 2 as behind at allreduce #4", name, which);
    return out;
}

static void case_stuck(void)
{
    const char *name = "stuck";
    job_t *j = start(name, 3, NULL, 0);
    if (!j) {
        return;
    }
    TAP_OK(job_wait_key(j, 2, "stuck", GUARD_S) != NULL, "%s: rank 2 stops calling before #4",
           name);
    for (int r = 0; r < 2; r++) {
        reported(j, name, r, TEMPO_ERR_TIMEOUT, "timeout");
    }
    TAP_OK(!file_exists(2), "%s: rank 2, stuck outside tempo, wrote none", name);
    const char *out = run_tool(survivors, 2);
    TAP_EQ_INT(tool_rc, 1, "%s: tempo-trace flight on the survivors' files exits 1", name);
    TAP_CONTAINS(out, "BEHIND: rank 2 wrote no file", "%s: it names rank 2 as behind", name);
    TAP_CONTAINS(out, "wait for it at allreduce #4 ", "%s: at allreduce #4", name);
    TAP_CONTAINS(out, "last program operation completed by every rank with a file: allreduce #3",
                 "%s: and #3 as the last one every rank completed", name);
    /* SIGUSR1 to the stuck rank: its progress thread writes its file (its caller is outside). */
    job_kill(j, 2, SIGUSR1);
    for (double t0 = job_now(); !file_exists(2) && job_now() - t0 < GUARD_S;) {
        poll(NULL, 0, 10); /* (a hang guard: the file appears within the thread's 200 ms nap) */
    }
    TAP_EQ_STR(file_reason(2), "signal", "%s: SIGUSR1 makes rank 2 write its file", name);
    out = all_say_behind(name, "with rank 2's file on SIGUSR1");
    TAP_CONTAINS(out, "rank 2 is behind (it was at allreduce #3 (1024 x float32 sum, ",
                 "%s: after #3", name);
    TAP_CONTAINS(out, "): done after ", "%s: done", name);
    TAP_CONTAINS(out, "no caller inside tempo", "%s: and outside tempo", name);
    /* Rank 2's #4 may even complete (the shared-memory all-reduce finds the data the others
     * published before they gave up); its #5 learns that the job failed. */
    for (int r = 0; r < 3; r++) {
        job_go(j, r);
    }
    job_wait_key(j, 2, "status", GUARD_S);
    job_go(j, 2);
    job_wait_key(j, 2, "destroy", GUARD_S);
    tap_diag("%s: rank 2 back in tempo: #4 %s (%s), destroy %s", name, job_get(j, 2, "status"),
             job_get(j, 2, "msg"), job_get(j, 2, "destroy"));
    TAP_EQ_STR(file_reason(2), "timeout",
               "%s: rank 2 rewrote its file once back in tempo "
               "(the job's failure)",
               name);
    out = all_say_behind(name, "with rank 2's file on the failure");
    TAP_CONTAINS(out, "it called #4 only after the job had failed",
                 "%s: rank 2's #4 came after the job had failed", name);
    job_end(j, GUARD_S, name);
}

static void case_killed(void)
{
    const char *name = "killed";
    job_t *j = start(name, 3, NULL, 3);
    if (!j) {
        return;
    }
    TAP_OK(job_wait_key(j, 2, "stuck", GUARD_S) != NULL, "%s: rank 2 stops before #4", name);
    job_kill(j, 2, SIGKILL);
    for (int r = 0; r < 2; r++) {
        reported(j, name, r, TEMPO_ERR_REMOTE, "failure");
    }
    const char *out = run_tool(survivors, 2);
    TAP_EQ_INT(tool_rc, 1, "%s: tempo-trace flight exits 1", name);
    TAP_CONTAINS(out, "BEHIND: rank 2 wrote no file", "%s: it names rank 2 as behind", name);
    /* #4, or #3 when rank 2 finished #3 first and died while the others were still in it: then
     * the line may say so of the survivor still in #3 ("...; rank 1 did not complete allreduce
     * #3", seen 1 run in 3 under load) */
    const char *behind = strstr(out, "BEHIND: rank 2 wrote no file");
    char line[512] = "";
    if (behind) {
        snprintf(line, sizeof(line), "%.*s", (int)strcspn(behind, "\n"), behind);
    }
    TAP_OK(strstr(line, "allreduce #4 ") || strstr(line, "allreduce #3 "),
           "%s: at allreduce #4 (or #3): %s", name, line);
    for (int r = 0; r < 2; r++) {
        job_go(j, r);
    }
    job_finish(j, GUARD_S);
    for (int r = 0; r < 2; r++) {
        TAP_OK(job_exited(j, r, 0), "%s: rank %d exited 0", name, r);
    }
    job_free(j);
    free(j);
}

static void case_mismatch(void)
{
    const char *name = "mismatch";
    job_t *j = start(name, 3, NULL, 1);
    if (!j) {
        return;
    }
    for (int r = 0; r < 3; r++) {
        job_wait_key(j, r, "status", GUARD_S);
        TAP_EQ_INT(job_status_of(j, r, "status"), TEMPO_ERR_INVALID, "%s: rank %d's #3 fails", name,
                   r);
    }
    for (int r = 0; r < 3; r++) {
        job_go(j, r);
    }
    for (int r = 0; r < 3; r++) {
        job_wait_key(j, r, "destroy", GUARD_S);
        TAP_OK(file_exists(r), "%s: rank %d wrote its file", name, r);
    }
    const char *out = run_tool(all, 3);
    TAP_EQ_INT(tool_rc, 1, "%s: tempo-trace flight exits 1", name);
    TAP_CONTAINS(out, "MISMATCH at program #3: count 1025 on rank 1, 1024 on ranks 0, 2",
                 "%s: it reports the count at #3 and rank 1", name);
    job_end(j, GUARD_S, name);
}

/* A symbolic link at dir/NAME to the victim file, owned by another user where we may say so. */
static void plant_link(const char *name)
{
    char path[320], victim[320];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    unlink(path);
    if (symlink(victim, path) == 0 && geteuid() == 0) {
        (void)!lchown(path, 65534, 65534);
    }
}

/* The victim file still holds what it was created with. */
static int victim_intact(void)
{
    char path[320], b[64] = "";
    snprintf(path, sizeof(path), "%s/victim", dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(b, 1, sizeof(b) - 1, f) : 0;
    if (f) {
        fclose(f);
    }
    b[n] = 0;
    return !strcmp(b, "victim\n");
}

static void make_victim(void)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/victim", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("victim\n", f);
        fclose(f);
    }
}

/* A link where the trace file goes: init fails naming it, nothing written through it. */
static int trace_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    tempo_comm_t comm = rk_init();
    if (comm) {
        tempo_comm_destroy(comm);
    }
    return 0;
}

static void case_links(void)
{
    const char *name = "links";
    char env_trace[320];
    snprintf(env_trace, sizeof(env_trace), "TEMPO_TRACE=%s/tr.%%r.json", dir);
    make_victim();
    plant_link("tr.0.json");
    const char *env[] = {"TEMPO_TIMEOUT=2s", env_trace, NULL};
    job_t *j = calloc(1, sizeof(*j));
    if (job_start(j, 1, env, trace_rank, NULL) != 0) {
        TAP_OK(0, "%s: start 1 rank", name);
        free(j);
        return;
    }
    job_wait_key(j, 0, "init", GUARD_S);
    /* (rk_init puts "init" first, then "initmsg" on a failure: wait for that one too) */
    const char *msg = job_status_of(j, 0, "init") != TEMPO_OK
                          ? job_wait_key(j, 0, "initmsg", GUARD_S)
                          : NULL;
    TAP_EQ_INT(job_status_of(j, 0, "init"), TEMPO_ERR_SYSTEM,
               "%s: a link at the TEMPO_TRACE path: init fails (%s)", name, msg ? msg : "");
    TAP_OK(msg && strstr(msg, "TEMPO_TRACE: cannot create") && strstr(msg, "tr.0.json"),
           "%s: saying which file it could not create", name);
    job_end(j, GUARD_S, name);
    TAP_OK(victim_intact(), "%s: nothing was written through the TEMPO_TRACE link", name);
    char path[320];
    snprintf(path, sizeof(path), "%s/tr.0.json", dir);
    unlink(path);
}

static void case_signal(void)
{
    const char *name = "signal";
    static const char *const at_exit[] = {"TEMPO_FLIGHT_RECORDER_AT_EXIT=1", NULL};
    make_victim();
    plant_link("fr.0.json.tmp");
    plant_link("fr.1.json.tmp");
    job_t *j = start(name, 2, at_exit, 2);
    if (!j) {
        return;
    }
    for (int r = 0; r < 2; r++) {
        reported(j, name, r, TEMPO_OK, "signal");
        TAP_OK(file_has(r, "\"scheduler\": {\"coordinator\": 0, \"policy\": \"tic\""),
               "%s: rank %d's file has the scheduler's state", name, r);
        TAP_OK(file_has(r, "\"lane\": \"scheduled\"") && file_has(r, "\"priority\": 2"),
               "%s: and scheduled chunks with their priority", name);
        TAP_OK(file_has(r, r ? "{\"rank\": 0, \"host\"" : "{\"rank\": 1, \"host\"") &&
                   !file_has(r, "\"transport\": null"),
               "%s: and its peer's transport", name);
    }
    for (int r = 0; r < 2; r++) {
        job_go(j, r);
    }
    for (int r = 0; r < 2; r++) {
        job_wait_key(j, r, "destroy", GUARD_S);
        TAP_EQ_STR(file_reason(r), "exit", "%s: rank %d rewrote it at the end (AT_EXIT)", name, r);
    }
    struct stat sb;
    char path[320];
    int regular = 0;
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof(path), "%s/fr.%d.json", dir, r);
        regular += lstat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    TAP_OK(regular == 2 && victim_intact(),
           "%s: with links planted at the dumps' temporary names, both files are regular files "
           "and nothing was written through the links (%d regular)", name, regular);
    const char *out = run_tool(survivors, 2); /* (ranks 0 and 1: the whole job here) */
    TAP_EQ_INT(tool_rc, 0, "%s: tempo-trace flight exits 0", name);
    TAP_CONTAINS(out, "consistent: every rank posted and completed the same operations",
                 "%s: the ranks agree", name);
    TAP_CONTAINS(out,
                 "last scheduled operation completed by every rank with a file: allreduce "
                 "scheduled #2 (300 x float32 sum",
                 "%s: and the scheduled lane's chunks", name);
    job_end(j, GUARD_S, name);
}

int main(void)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        tap_skip_all("/usr/bin/python3 not found (tempo-trace)");
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/tempo-flight.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        TAP_OK(0, "create a directory for the files");
        return tap_done();
    }
    case_stuck();
    case_killed();
    case_mismatch();
    case_signal();
    case_links();
    clear_files(3);
    char victim[320];
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    unlink(victim);
    rmdir(dir);
    return tap_done();
}
