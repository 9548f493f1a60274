/*
 * tempo-run.c — the local launcher: `tempo-run -n N [options] [--] PROGRAM [ARGS...]`.
 *
 * Starts N copies of PROGRAM on this machine, one per rank, with the environment a tempo job
 * bootstraps from (TEMPO_RANK, TEMPO_SIZE, TEMPO_LOCAL_RANK, TEMPO_LOCAL_SIZE, TEMPO_ROOT),
 * prefixes every line the ranks write with "[rank] ", forwards signals, ends the whole job when one
 * rank fails, and turns the ranks' fates into one exit status. It is not a multi-host launcher and
 * does not link libtempo: it is plain POSIX plus a few Linux calls (prctl, close_range), so it can
 * launch any program, tempo's or not.
 *
 * With --restart N it relaunches a job that failed (a rank exited non-zero or died of a signal of
 * its own, or --timeout expired) up to N times, once every rank of the failed attempt is reaped:
 * each attempt is a whole new job, with a fresh rendezvous socket (the old one's backlog may hold
 * the dead attempt's connections) and, unless the user set one, a fresh TEMPO_AUTH_KEY (a stray
 * grandchild of a dead attempt cannot join the next), and TEMPO_RESTART=k (0 on the first launch)
 * so the program can tell a restart from a new run (tempo-train --resume auto resumes its latest
 * checkpoint). --min-ranks M relaunches without the ranks that failed, as if their hosts were lost,
 * never below M and in multiples of --rank-multiple K (the program's layout, which tempo-run
 * cannot know). A job the user interrupted, whose output reader is gone, or that cannot succeed as
 * launched (PROGRAM not executable, a rank exiting with status 2, a usage error) is not restarted.
 *
 * Invariants:
 * - tempo-run signals only pids it forked, and only while they are unreaped: a zombie keeps its
 *   pid, so the pid cannot have been reused by an unrelated process. It never signals groups.
 * - Every descriptor tempo-run opens is close-on-exec and inherited ones are made so at start, so
 *   a rank starts with exactly fds 0, 1 and 2, and rank 0 also with the rendezvous socket (named
 *   by TEMPO_ROOT_FD), which tempo-run listens on from before the first fork: a port released for
 *   rank 0 to bind could be taken by another socket in between.
 * - All rank output passes through this one process, one write() per prefixed line, so lines of
 *   different ranks never interleave mid-line.
 * - One event loop blocks in poll() on the rank pipes and a self-pipe fed by the signal handlers;
 *   the only timeouts are real deadlines (--timeout, --grace). No sleeps, no periodic wakeups.
 * - tempo-run always returns: ranks still running --grace seconds (default 3) after a forwarded
 *   SIGINT, SIGTERM or SIGHUP, or after the SIGTERM with which it ends the job (a rank failed,
 *   --timeout expired), get SIGKILL, and tempo-run names them.
 */
#include "config.h"
#include "util/helpers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>

#define TR_MAX_RANKS 4096
#define TR_LINE_MAX (64 * 1024) /* bytes of rank output per emitted line, newline excluded */
#define TR_PREFIX_MAX 16        /* room for "[4095] " (7 bytes) in front of every buffer */
#define TR_BUF_INIT 4096        /* first allocation of a stream buffer; grows to TR_LINE_MAX + 1 */
#define TR_DRAIN_READS 256      /* reads per stream when draining after exit: a grandchild that
                                   keeps the pipe open and busy must not hold tempo-run forever */

#define TR_EXIT_USAGE 2 /* also a rank's status that is not restarted: a usage error, a refusal */
#define TR_EXIT_TIMEOUT 124
#define TR_EXIT_INTERNAL 125
#define TR_EXIT_NOEXEC 126
#define TR_EXIT_NOTFOUND 127

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2) /* linux/close_range.h, kernel 5.11 */
#endif

/* One output pipe of one rank. The buffer keeps TR_PREFIX_MAX bytes of room in front of the data so
   a prefix can be copied right before a line and the two written with a single write(). */
typedef struct {
    int fd;     /* read end, non-blocking; -1 once closed */
    int out_fd; /* where its lines go: 1 or 2 */
    int rank;   /* whose stream this is */
    char *buf;  /* [TR_PREFIX_MAX room][len pending bytes][spare...][1 byte for an added '\n'] */
    size_t cap; /* bytes allocated; 0 with buf == NULL */
    size_t len; /* pending bytes (a partial line), always <= TR_LINE_MAX between reads */
} tr_stream_t;

typedef struct {
    pid_t pid;          /* 0 until forked */
    bool alive;         /* forked and not reaped: the only state in which we may signal pid */
    bool ended;         /* tempo-run ended it: it was running when the job started ending, or it
                           died of a signal in `caused` */
    uint32_t caused;    /* bit s: tempo-run forwarded signal s to this rank, or provoked it
                           (SIGPIPE after closing the rank's pipe to a dead reader) */
    bool reaped;        /* waited for, its report pending (reap): status holds its fate */
    int status;         /* waitpid's status while reaped */
    bool failed;        /* it failed on its own (reported; --min-ranks drops it on restart) */
    char prefix[TR_PREFIX_MAX];
    size_t prefix_len;
    tr_stream_t out[2]; /* [0] the rank's stdout, [1] its stderr */
} tr_rank_t;

/* Signals forwarded to the ranks; the first four also end the job when repeated (on_forward). */
static const int tr_fwd_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static volatile sig_atomic_t tr_sig_wfd = -1; /* self-pipe write end, for the handler */

static struct {
    /* options */
    int nranks;        /* ranks of the current attempt: -n, or fewer after --min-ranks restarts */
    int max_ranks;     /* -n: what tr.ranks and the poll arrays are sized for */
    int restarts;      /* --restart N: relaunches after a failure, 0: none */
    int min_ranks;     /* --min-ranks M: drop failed ranks on restart down to M; 0: keep -n */
    int rank_multiple; /* --rank-multiple K: a restart's size is a multiple of K [1] */
    bool prefix;
    double timeout_s; /* 0: no timeout */
    double grace_s;
    char **prog_argv; /* NULL-terminated, points into main's argv */

    /* ranks */
    tr_rank_t *ranks; /* (nranks) */
    int live;         /* forked and not yet reaped */
    bool starting;    /* still forking ranks */

    /* the job's end */
    bool ending;         /* SIGTERM sent to the ranks alive at that moment */
    bool killed;         /* SIGKILL sent */
    bool have_result;    /* exit_code is final: set by the first failure, timeout or signal */
    int exit_code;
    int64_t timeout_at;  /* CLOCK_MONOTONIC ns; 0: not armed */
    int64_t kill_at;     /* CLOCK_MONOTONIC ns: SIGKILL to the ranks still alive; 0: not armed */
    int kill_after;      /* the signal whose grace period kill_at ends */
    int nterm;           /* SIGINT/TERM/HUP/QUIT received so far */

    /* restarts */
    int attempt;         /* 0: the first launch; k: the k-th restart (TEMPO_RESTART) */
    int64_t started_at;  /* CLOCK_MONOTONIC ns: this attempt's launch */
    int64_t failed_at;   /* when the result was set by a failure */
    bool restartable;    /* the result is a rank's own failure or --timeout */
    bool interrupted;    /* the user ended the job (a signal), or our output reader is gone */
    char why[256];       /* the first failure in words, for the restart line */
    bool own_key;        /* TEMPO_AUTH_KEY is ours: a new one per attempt */
    bool own_root;       /* TEMPO_ROOT is ours: a new socket per attempt */

    /* signals */
    int sig_rfd;
    uint32_t handled;            /* bit s: we installed a handler for s (children reset it) */
    struct sigaction saved_pipe; /* original SIGPIPE and SIGTTIN actions, restored in children */
    struct sigaction saved_ttin;
    sigset_t orig_mask;
    pid_t self;

    struct rlimit orig_nofile;
    bool nofile_raised;

    /* the rendezvous socket (setup_env): listening at TEMPO_ROOT from before the first fork,
       handed to rank 0 as TEMPO_ROOT_FD, closed here once the ranks are started; -1 if none */
    int root_fd;

    /* stdin relay to rank 0, used only when stdin is a terminal (see setup_stdin) */
    int relay_r, relay_w; /* pipe; relay_r is dup'ed to rank 0's fd 0 and then closed here */
    char relay_buf[4096];
    size_t relay_len, relay_off;

    int sink_errno[3]; /* [1], [2]: errno of the first failed write to fd 1 / 2; 0 while fine */
    bool sink_closed[3];
    char *list;                /* scratch for rank lists, (nranks * 7 + 16) bytes */
    struct pollfd *pfds;       /* (2 * nranks + 2) */
    tr_stream_t **pfd_streams; /* stream behind pfds[i], NULL for the others */
} tr = {.relay_r = -1, .relay_w = -1, .sig_rfd = -1, .root_fd = -1};

static void usage_short(FILE *f)
{
    fputs("Usage: tempo-run -n N [options] [--] PROGRAM [ARGS...]\n", f);
}

static void usage_full(void)
{
    usage_short(stdout);
    fputs(
        "\n"
        "Start N copies of PROGRAM on this machine, one per rank, and wait for them.\n"
        "PROGRAM is looked up in PATH. Rank r runs with\n"
        "  TEMPO_RANK=r  TEMPO_SIZE=N  TEMPO_LOCAL_RANK=r  TEMPO_LOCAL_SIZE=N\n"
        "  TEMPO_ROOT=127.0.0.1:PORT  (tempo-run listens there and hands the socket\n"
        "                             to rank 0 as TEMPO_ROOT_FD; a non-empty\n"
        "                             TEMPO_ROOT already set is kept)\n"
        "  TEMPO_AUTH_KEY=<64 random hex digits>, the job's own key (in a build with\n"
        "                             libcrypto; a TEMPO_AUTH_KEY or TEMPO_AUTH_KEY_FILE\n"
        "                             already set is kept)\n"
        "  TEMPO_RESTART=k  0 on the first launch, k on the k-th restart\n"
        "\n"
        "Options:\n"
        "  -n, -np, --np N      number of ranks, 1 to 4096 (required)\n"
        "  -x NAME=VALUE        set NAME=VALUE for every rank (repeatable); the\n"
        "                       rest of the environment is inherited anyway\n"
        "      --no-prefix      pass the ranks' output through unchanged\n"
        "      --timeout SECONDS\n"
        "                       end the job if it still runs after SECONDS\n"
        "      --grace SECONDS  how long ranks have to stop after a SIGINT, SIGTERM\n"
        "                       or SIGHUP (forwarded, or sent to end the job)\n"
        "                       before they get SIGKILL (default 3)\n"
        "      --restart N      relaunch the job when it fails, up to N times (below)\n"
        "      --min-ranks M    on a restart, leave out the ranks that failed, as if\n"
        "                       their hosts were lost, but keep at least M ranks\n"
        "      --rank-multiple K\n"
        "                       with --min-ranks: a restart's number of ranks is a\n"
        "                       multiple of K (what the program's layout needs, e.g.\n"
        "                       tempo-train's --tp x --pp) (default 1)\n"
        "  -h, --help           print this help and exit\n"
        "  -V, --version        print the version and exit\n"
        "\n"
        "Each line a rank writes to stdout (stderr) appears on tempo-run's stdout\n"
        "(stderr) as \"[r] line\"; a line over 64 KiB is cut into pieces, each\n"
        "prefixed. Rank 0 reads tempo-run's stdin, the other ranks /dev/null.\n"
        "\n"
        "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to\n"
        "every rank still running; ranks still running --grace seconds after a\n"
        "forwarded SIGINT, SIGTERM or SIGHUP get SIGKILL, and tempo-run names them.\n"
        "When a rank fails or --timeout expires, the others get SIGTERM, then\n"
        "SIGKILL after the grace period. A SIGINT, SIGTERM, SIGHUP or SIGQUIT that\n"
        "arrives while the job is ending, or the third one in all, kills the\n"
        "remaining ranks at once. If tempo-run is killed, so are the ranks.\n"
        "\n"
        "With --restart N, a job that failed (a rank exited with a non-zero status\n"
        "or was killed by a signal not sent through tempo-run, or --timeout, which\n"
        "counts per attempt, expired) is launched again once all its ranks are\n"
        "gone, up to N times, each time with a new TEMPO_ROOT socket and a new\n"
        "TEMPO_AUTH_KEY (unless set by the user) and one line on stderr:\n"
        "  tempo-run: restart 1 of 3: rank 2 (pid 812) was killed by signal 9\n"
        "  (Killed) at 4.2 s; relaunching 4 ranks\n"
        "The program resumes its own work (tempo-train --resume auto --ckpt-every N\n"
        "continues from its latest checkpoint). Not restarted: a job interrupted\n"
        "by a signal to tempo-run or whose output reader is gone, a PROGRAM that\n"
        "cannot be run, a rank exiting with status 2 (a usage error or refusal,\n"
        "which would repeat). With --min-ranks M, the restart has the ranks that\n"
        "did not fail (a timeout fails none), rounded down to a multiple of\n"
        "--rank-multiple, but at least M, numbered 0 on up, and says so:\n"
        "  tempo-run: restart 1 of 3 on 2 ranks (was 4): ...\n"
        "\n"
        "Exit status:\n"
        "  0      every rank exited with status 0 (with --restart: of the last attempt;\n"
        "         every status below is the last attempt's)\n"
        "  2      usage error\n"
        "  124    --timeout expired\n"
        "  125    tempo-run itself failed\n"
        "  126    PROGRAM could not be executed\n"
        "  127    PROGRAM was not found\n"
        "  other  the exit status of the first rank that failed, or 128+S if it\n"
        "         was killed by signal S (also a signal forwarded by tempo-run);\n"
        "         128+S also when ranks outlived a forwarded signal S by --grace\n"
        "         and were killed\n",
        stdout);
}

static _Noreturn void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tempo-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    usage_short(stderr);
    fputs("Run 'tempo-run --help' for the options and exit codes.\n", stderr);
    exit(TR_EXIT_USAGE);
}

/* Writes all of p, waiting out EINTR and a non-blocking fd that is full. Returns 0, or -1 with
   errno set (EPIPE when the reader is gone). */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            (void)poll(&pfd, 1, -1);
        } else {
            if (w == 0)
                errno = EIO;
            return -1;
        }
    }
    return 0;
}

/* Sends bytes to tempo-run's stdout or stderr. A sink that fails is remembered and then skipped;
   the main loop closes the ranks' pipes into a sink whose reader is gone (EPIPE), so the ranks get
   SIGPIPE as they would writing into a closed pipeline themselves. */
static void sink_write(int out_fd, const char *p, size_t n)
{
    if (tr.sink_errno[out_fd] != 0)
        return;
    if (write_all(out_fd, p, n) == 0)
        return;
    tr.sink_errno[out_fd] = errno != 0 ? errno : EIO;
}

/* tempo-run's own messages: "tempo-run: ...\n" in one write, so they never split a rank's line. */
static void vsay(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static void vsay(const char *fmt, va_list ap)
{
    static const char head[] = "tempo-run: ";
    char small[512];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return;
    size_t len = sizeof head - 1 + (size_t)n + 1;
    char *p = len + 1 <= sizeof small ? small : malloc(len + 1);
    if (p == NULL)
        return;
    memcpy(p, head, sizeof head - 1);
    vsnprintf(p + sizeof head - 1, (size_t)n + 1, fmt, ap);
    p[len - 1] = '\n';
    sink_write(2, p, len);
    if (p != small)
        free(p);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool rank_is_live(const tr_rank_t *r) { return r->alive; }
static bool rank_is_ended(const tr_rank_t *r) { return r->ended; }
static bool rank_not_started(const tr_rank_t *r) { return r->pid == 0; }

/* Writes the ranks picked by want() to tr.list as "0,1,3" or "0-5,7" (runs of three or more become
   ranges, so a 4096-rank list stays readable) and returns how many were picked. */
static int format_ranks(bool (*want)(const tr_rank_t *))
{
    char *p = tr.list;
    int count = 0;
    *p = '\0';
    for (int i = 0; i < tr.nranks;) {
        if (!want(&tr.ranks[i])) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < tr.nranks && want(&tr.ranks[j + 1]))
            j++;
        count += j - i + 1;
        if (p != tr.list)
            *p++ = ',';
        if (j - i >= 2)
            p += sprintf(p, "%d-%d", i, j);
        else if (j == i + 1)
            p += sprintf(p, "%d,%d", i, j);
        else
            p += sprintf(p, "%d", i);
        i = j + 1;
    }
    return count;
}

/* Kills every live rank and exits 125: for failures of tempo-run itself in the middle of a job,
   where leaving ranks behind would be worse than cutting them short. */
static _Noreturn void fatal(const char *what, int err)
{
    say("%s: %s; killing the ranks", what, strerror(err));
    for (int i = 0; i < tr.nranks; i++)
        if (tr.ranks[i].alive)
            kill(tr.ranks[i].pid, SIGKILL);
    for (int i = 0; i < tr.nranks; i++) {
        if (!tr.ranks[i].alive)
            continue;
        while (waitpid(tr.ranks[i].pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    exit(TR_EXIT_INTERNAL);
}

static void set_result(int code)
{
    if (!tr.have_result) {
        tr.have_result = true;
        tr.exit_code = code;
    }
}

/* A failure that ends the job: says it, and if it is the first, makes it the result and keeps its
   words and time for a restart line, to which later failures of the attempt are added.
   restartable: a rank's own failure or --timeout. */
static void failure(bool restartable, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void failure(bool restartable, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    size_t len = strlen(tr.why);
    if (tr.have_result && len + 2 < sizeof tr.why) {
        memcpy(tr.why + len, "; ", 2);
        len += 2;
    } else if (tr.have_result) {
        return;
    } else {
        set_result(code);
        tr.restartable = restartable;
        tr.failed_at = now_ns();
    }
    va_start(ap, fmt); /* cut at 255 bytes: the restart line's summary */
    vsnprintf(tr.why + len, sizeof tr.why - len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------------- rank output */

static void stream_close(tr_stream_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->cap = s->len = 0;
}

/* Writes prefix + p[0..n) (+ '\n' if add_nl) with one write. The bytes in front of p are either the
   buffer's prefix room or the tail of a line already written, so the prefix can go there. */
static void emit_piece(const tr_rank_t *r, const tr_stream_t *s, char *p, size_t n, bool add_nl)
{
    char *line = p - r->prefix_len;
    memcpy(line, r->prefix, r->prefix_len);
    if (!add_nl) {
        sink_write(s->out_fd, line, r->prefix_len + n);
        return;
    }
    char saved = p[n]; /* the next piece's first byte, or the spare byte at the end */
    p[n] = '\n';
    sink_write(s->out_fd, line, r->prefix_len + n + 1);
    p[n] = saved;
}

/* Emits every complete line pending in s, then over-long pieces; at EOF also the partial rest. */
static void stream_lines(const tr_rank_t *r, tr_stream_t *s, bool at_eof)
{
    if (s->buf == NULL)
        return;
    char *data = s->buf + TR_PREFIX_MAX;
    size_t start = 0;
    for (;;) {
        char *nl = memchr(data + start, '\n', s->len - start);
        if (nl == NULL)
            break;
        size_t n = (size_t)(nl - (data + start)) + 1;
        emit_piece(r, s, data + start, n, false);
        start += n;
    }
    /* A line over TR_LINE_MAX goes out in pieces that each end in an added newline, so no other
       rank's line can ever continue one of them on the same terminal line. */
    while (s->len - start > TR_LINE_MAX) {
        emit_piece(r, s, data + start, TR_LINE_MAX, true);
        start += TR_LINE_MAX;
    }
    if (at_eof && s->len > start) {
        emit_piece(r, s, data + start, s->len - start, true);
        start = s->len;
    }
    memmove(data, data + start, s->len - start);
    s->len -= start;
    /* Give big buffers back once empty: 4096 ranks x 2 streams x 64 KiB would be 512 MiB. */
    if (s->len == 0 && s->cap > TR_PREFIX_MAX + TR_BUF_INIT + 1) {
        free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
}

/* Makes sure s has room for a read: allocates lazily, doubles while a partial line fills it. */
static void stream_reserve(tr_stream_t *s)
{
    size_t data_cap = s->buf != NULL ? s->cap - TR_PREFIX_MAX - 1 : 0;
    if (s->buf != NULL && (data_cap - s->len >= TR_BUF_INIT / 4 || data_cap == TR_LINE_MAX + 1))
        return;
    size_t want = data_cap != 0 ? 2 * data_cap : TR_BUF_INIT;
    if (want > TR_LINE_MAX + 1)
        want = TR_LINE_MAX + 1; /* a full line plus its own newline fits whole */
    char *nb = realloc(s->buf, TR_PREFIX_MAX + want + 1);
    if (nb == NULL)
        fatal("cannot buffer rank output", ENOMEM);
    s->buf = nb;
    s->cap = TR_PREFIX_MAX + want + 1;
}

/* One read() from a rank pipe. Returns 1 if it got data, 0 if the pipe is empty for now, -1 if the
   stream is closed (EOF or error; the partial last line has been emitted with a newline). */
static int stream_pump(tr_rank_t *r, tr_stream_t *s)
{
    ssize_t n;
    if (s->fd < 0)
        return -1;
    if (!tr.prefix) {
        static char raw[TR_LINE_MAX];
        n = read(s->fd, raw, sizeof raw);
        if (n > 0) {
            sink_write(s->out_fd, raw, (size_t)n);
            return 1;
        }
    } else {
        stream_reserve(s);
        char *data = s->buf + TR_PREFIX_MAX;
        size_t room = s->cap - TR_PREFIX_MAX - 1 - s->len;
        n = read(s->fd, data + s->len, room);
        if (n > 0) {
            s->len += (size_t)n;
            stream_lines(r, s, false);
            return 1;
        }
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    stream_lines(r, s, true);
    stream_close(s);
    return -1;
}

/* Reads what a rank left in its pipes, so its last lines come out before any report about it. */
static void drain_rank(tr_rank_t *r)
{
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < TR_DRAIN_READS && stream_pump(r, &r->out[k]) == 1; i++) {
        }
}

/* After a sink failed with EPIPE, close the ranks' pipes into it (see sink_write). */
static void close_dead_sinks(void)
{
    for (int fd = 1; fd <= 2; fd++) {
        if (tr.sink_errno[fd] == 0 || tr.sink_closed[fd])
            continue;
        tr.sink_closed[fd] = true;
        tr.interrupted |= tr.sink_errno[fd] == EPIPE; /* a restart would have no reader either */
        if (tr.sink_errno[fd] != EPIPE) {
            say("cannot write to %s: %s; discarding the ranks' output to it",
                fd == 1 ? "stdout" : "stderr", strerror(tr.sink_errno[fd]));
            continue;
        }
        for (int i = 0; i < tr.nranks; i++) {
            stream_close(&tr.ranks[i].out[fd - 1]);
            tr.ranks[i].caused |= 1U << SIGPIPE;
        }
    }
}

/* ----------------------------------------------------------------------------- stdin relay */

/* Rank 0 runs in its own process group, which is never the terminal's foreground group; reading a
   terminal from there stops it with SIGTTIN, and nothing would ever wake it. So when stdin is a
   terminal, tempo-run reads it (only while it is itself in the foreground) and relays the bytes to
   rank 0 through a pipe. Any other stdin (file, pipe, /dev/null) rank 0 inherits directly. */
static void setup_stdin(void)
{
    int p[2];
    if (!isatty(0))
        return;
    if (pipe2(p, O_CLOEXEC) != 0) {
        say("cannot create the stdin pipe for rank 0: %s", strerror(errno));
        exit(TR_EXIT_INTERNAL);
    }
    fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
    tr.relay_r = p[0];
    tr.relay_w = p[1];
}

static void relay_close(void)
{
    if (tr.relay_w >= 0)
        close(tr.relay_w);
    tr.relay_w = -1;
    tr.relay_len = tr.relay_off = 0;
}

static bool relay_wants_stdin(void)
{
    return tr.relay_w >= 0 && tr.relay_off == tr.relay_len && tcgetpgrp(0) == getpgrp();
}

static void relay_flush(void)
{
    while (tr.relay_w >= 0 && tr.relay_off < tr.relay_len) {
        ssize_t w = write(tr.relay_w, tr.relay_buf + tr.relay_off, tr.relay_len - tr.relay_off);
        if (w > 0) {
            tr.relay_off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return; /* rank 0 is not reading; poll for POLLOUT */
        } else {
            relay_close(); /* EPIPE: rank 0 closed its stdin or exited */
            return;
        }
    }
    tr.relay_len = tr.relay_off = 0;
}

static void relay_read(void)
{
    ssize_t n = read(0, tr.relay_buf, sizeof tr.relay_buf);
    if (n > 0) {
        tr.relay_len = (size_t)n;
        tr.relay_off = 0;
        relay_flush();
    } else if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
    } else {
        relay_close(); /* EOF (^D), or EIO: rank 0 sees EOF, as it would reading the terminal */
    }
}

/* ---------------------------------------------------------------------------- ending the job */

/* Arms the SIGKILL deadline: --grace after sig was sent. An earlier deadline stays. */
static void arm_kill(int sig)
{
    int64_t at = now_ns() + (int64_t)(tr.grace_s * 1e9);
    if (tr.kill_at == 0 || at < tr.kill_at) {
        tr.kill_at = at;
        tr.kill_after = sig;
    }
}

/* Sends SIGTERM to every live rank, marks them ended and arms the SIGKILL deadline. Idempotent. */
static void start_ending(void)
{
    if (tr.ending)
        return;
    tr.ending = true;
    arm_kill(SIGTERM);
    for (int i = 0; i < tr.nranks; i++) {
        tr_rank_t *r = &tr.ranks[i];
        if (r->reaped)
            r->ended = true; /* exited in the same moment: not signalled, reported as ended */
        if (!r->alive)
            continue;
        r->ended = true;
        kill(r->pid, SIGTERM);
        kill(r->pid, SIGCONT); /* a stopped rank would otherwise hold SIGTERM pending until KILL */
    }
}

/* SIGKILL to every live rank; they are ended by us, so their death is no failure of theirs. */
static void kill_live(void)
{
    for (int i = 0; i < tr.nranks; i++) {
        if (tr.ranks[i].alive) {
            tr.ranks[i].ended = true;
            kill(tr.ranks[i].pid, SIGKILL);
        }
    }
    tr.killed = true;
}

/* A reaped rank's fate (reap has marked it not alive). */
static void on_rank_exit(tr_rank_t *r, int status)
{
    drain_rank(r);
    r->reaped = false;
    tr.live--;
    if (r == &tr.ranks[0])
        relay_close();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* A SIGKILL that tempo-run did not send is the rank's own fate even after we asked it to stop:
       a rank that was killed (a lost host, the OOM killer) can be reaped after a peer that exited
       on losing it, once the job is ending. */
    bool killed_outside = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && !tr.killed;
    if (r->ended && !killed_outside)
        return; /* we asked it to stop; it is listed in "ended ranks" at the end */
    if (WIFSIGNALED(status) && WTERMSIG(status) < 32 &&
        (r->caused & (1U << WTERMSIG(status))) != 0) {
        /* It died of a signal the user sent through us (say ^C), or of the SIGPIPE that a closed
           pipeline (`tempo-run ... | head`) gives: not a failure of the rank, but the job cannot
           go on without it. */
        r->ended = true;
    } else if (WIFEXITED(status)) {
        r->failed = true;
        failure(code != TR_EXIT_USAGE, code, "rank %d (pid %ld) exited with status %d",
                (int)(r - tr.ranks), (long)r->pid, code);
    } else {
        int sig = WTERMSIG(status);
        r->failed = true;
        failure(true, code, "rank %d (pid %ld) was killed by signal %d (%s)%s",
                (int)(r - tr.ranks), (long)r->pid, sig, strsignal(sig),
                WCOREDUMP(status) ? ", core dumped" : "");
    }
    set_result(code);
    start_ending();
}

/* Reaps every rank that has exited. Our only children are ranks, so waitpid(-1) is safe. All
   exits at hand are collected first and those by a signal reported first: a rank killed by a
   signal is the likelier cause when another exits at once on losing it, and the first failure
   reported is the job's exit status and leads the restart line. */
static void reap(void)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            break;
        for (int i = 0; i < tr.nranks; i++) {
            tr_rank_t *r = &tr.ranks[i];
            if (r->alive && r->pid == pid) {
                r->alive = false; /* its pid may be reused from now on: never signal it again */
                r->reaped = true;
                r->status = status;
                break;
            }
        }
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < tr.nranks; i++)
            if (tr.ranks[i].reaped && (pass == 1 || WIFSIGNALED(tr.ranks[i].status)))
                on_rank_exit(&tr.ranks[i], tr.ranks[i].status);
}

static void on_forward(int sig)
{
    bool terminal = sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
    if (terminal) {
        tr.nterm++;
        tr.interrupted = true; /* the user ends the job: no restart */
    }
    if (tr.live == 0)
        return;
    if (terminal && (tr.ending || tr.nterm >= 3)) {
        /* The user insists: ranks that ignore or outlive the polite signal die now. */
        int n = format_ranks(rank_is_live);
        say("received signal %d (%s) %s; killing rank%s %s", sig, strsignal(sig),
            tr.ending ? "while ending the job" : "for the third time", n == 1 ? "" : "s", tr.list);
        set_result(128 + sig);
        start_ending();
        kill_live();
        return;
    }
    if (terminal && tr.starting) {
        /* Ranks not forked yet would miss the signal; stop launching and end the job instead. */
        say("received signal %d (%s) while starting ranks; ending the job", sig, strsignal(sig));
        set_result(128 + sig);
        start_ending();
        return;
    }
    int n = format_ranks(rank_is_live);
    say("forwarding signal %d (%s) to rank%s %s", sig, strsignal(sig), n == 1 ? "" : "s", tr.list);
    for (int i = 0; i < tr.nranks; i++) {
        tr_rank_t *r = &tr.ranks[i];
        if (!r->alive)
            continue;
        r->caused |= 1U << sig;
        kill(r->pid, sig);
    }
    /* A request to stop (not SIGQUIT: a core dump must not be cut short) has --grace to work:
       ranks that ignore or outlive it are killed then, so tempo-run always returns. */
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
        arm_kill(sig);
}

/* Reads the self-pipe: forwards what should be forwarded, then reaps on SIGCHLD. */
static void handle_signals(void)
{
    unsigned char b[64];
    bool chld = false;
    for (;;) {
        ssize_t n = read(tr.sig_rfd, b, sizeof b);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++) {
            if (b[i] == SIGCHLD)
                chld = true;
            else if (b[i] != SIGCONT) /* SIGCONT only wakes us to re-check the foreground */
                on_forward(b[i]);
        }
    }
    if (chld)
        reap();
}

static void check_deadlines(void)
{
    int64_t now = now_ns();
    if (!tr.ending && tr.timeout_at != 0 && now >= tr.timeout_at && tr.live > 0) {
        int n = format_ranks(rank_is_live);
        failure(true, TR_EXIT_TIMEOUT, "timed out after %g s; rank%s %s still running",
                tr.timeout_s, n == 1 ? "" : "s", tr.list);
        start_ending();
    }
    if (tr.kill_at != 0 && !tr.killed && now >= tr.kill_at && tr.live > 0) {
        int n = format_ranks(rank_is_live);
        const char *after = tr.kill_after == SIGINT   ? "SIGINT"
                            : tr.kill_after == SIGHUP ? "SIGHUP"
                                                      : "SIGTERM";
        say("rank%s %s still running %g s after %s; sending SIGKILL", n == 1 ? "" : "s", tr.list,
            tr.grace_s, after);
        set_result(128 + tr.kill_after); /* as if they had died of it; an earlier result stays */
        kill_live();
    }
}

/* Milliseconds until the next deadline, rounded up so we never wake just before it; -1: none. */
static int next_timeout_ms(void)
{
    int64_t at = 0;
    if (!tr.ending && tr.timeout_at != 0)
        at = tr.timeout_at;
    if (tr.kill_at != 0 && !tr.killed && (at == 0 || tr.kill_at < at))
        at = tr.kill_at;
    if (at == 0)
        return -1;
    int64_t left = at - now_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > 1000000000 ? 1000000000 : (int)ms;
}

/* ------------------------------------------------------------------------------- starting */

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    /* If the pipe is full the byte is dropped; unread bytes are pending, so we wake anyway. */
    if (write(tr_sig_wfd, &b, 1) < 0) {
    }
    errno = saved;
}

static void setup_signals(void)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        say("cannot create the signal pipe: %s", strerror(errno));
        exit(TR_EXIT_INTERNAL);
    }
    tr.sig_rfd = p[0];
    tr_sig_wfd = p[1];
    sigprocmask(SIG_SETMASK, NULL, &tr.orig_mask);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof tr_fwd_signals / sizeof tr_fwd_signals[0]; i++) {
        int sig = tr_fwd_signals[i];
        struct sigaction old;
        sigaction(sig, NULL, &old);
        /* An ignored signal stays ignored, for us and the ranks (nohup, `cmd &` in scripts). */
        if (old.sa_handler == SIG_IGN)
            continue;
        sigaction(sig, &sa, NULL);
        tr.handled |= 1U << sig;
    }
    sigaction(SIGCONT, &sa, NULL);
    tr.handled |= 1U << SIGCONT;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    tr.handled |= 1U << SIGCHLD;

    /* A vanished reader shows up as EPIPE (see sink_write); a read of the terminal from the
       background as EIO instead of stopping us (see relay_read). Children get the originals. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &tr.saved_pipe);
    sigaction(SIGTTIN, &sa, &tr.saved_ttin);
}

/* What a child reports through its close-on-exec pipe when it cannot exec. */
typedef struct {
    int stage; /* TR_STAGE_* */
    int err;   /* errno */
} tr_child_report_t;

enum { TR_STAGE_EXEC, TR_STAGE_STDIO, TR_STAGE_ENV };

static _Noreturn void child_fail(int report_fd, int stage)
{
    tr_child_report_t rep = {.stage = stage, .err = errno};
    if (write(report_fd, &rep, sizeof rep) < 0) {
    }
    _exit(TR_EXIT_INTERNAL);
}

/* Runs in the forked child with all signals blocked. Single-threaded parent, so the libc calls
   here (setenv) are safe between fork and exec. */
static _Noreturn void child_main(int rank, int out_w, int err_w, int report_fd)
{
    for (int sig = 1; sig < 32; sig++)
        if (tr.handled & (1U << sig))
            signal(sig, SIG_DFL);
    sigaction(SIGPIPE, &tr.saved_pipe, NULL);
    sigaction(SIGTTIN, &tr.saved_ttin, NULL);
    /* Own process group: ^C on the terminal reaches tempo-run alone, which forwards it. */
    setpgid(0, 0);
    /* If tempo-run dies (even by SIGKILL), its ranks must not run on unattended. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != tr.self)
        _exit(TR_EXIT_INTERNAL);
    sigprocmask(SIG_SETMASK, &tr.orig_mask, NULL);
    if (tr.nofile_raised)
        setrlimit(RLIMIT_NOFILE, &tr.orig_nofile);

    if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        child_fail(report_fd, TR_STAGE_STDIO);
    if (rank == 0 && tr.relay_r >= 0) {
        if (dup2(tr.relay_r, 0) < 0)
            child_fail(report_fd, TR_STAGE_STDIO);
    } else if (rank != 0) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || dup2(fd, 0) < 0)
            child_fail(report_fd, TR_STAGE_STDIO);
    }

    char num[16];
    snprintf(num, sizeof num, "%d", rank);
    if (setenv("TEMPO_RANK", num, 1) != 0 || setenv("TEMPO_LOCAL_RANK", num, 1) != 0)
        child_fail(report_fd, TR_STAGE_ENV);
    /* rank 0 inherits the rendezvous socket, the one descriptor beyond 0-2 a rank starts with */
    if (rank == 0 && tr.root_fd >= 0) {
        snprintf(num, sizeof num, "%d", tr.root_fd);
        if (fcntl(tr.root_fd, F_SETFD, 0) != 0 || setenv("TEMPO_ROOT_FD", num, 1) != 0)
            child_fail(report_fd, TR_STAGE_ENV);
    }

    execvp(tr.prog_argv[0], tr.prog_argv);
    child_fail(report_fd, TR_STAGE_EXEC);
}

/* Forks rank r and waits until it has exec'ed PROGRAM or failed to. Returns 0 or an exit code. */
static int start_rank(int rank)
{
    tr_rank_t *r = &tr.ranks[rank];
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1};
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0) {
        int err = errno;
        int fds[] = {outp[0], outp[1], errp[0], errp[1]};
        for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        say("cannot create pipes for rank %d: %s%s", rank, strerror(err),
            err == EMFILE ? " (raise the open-file limit, ulimit -n)" : "");
        return TR_EXIT_INTERNAL;
    }

    /* Blocked across fork so no handler of ours runs in the child before it resets them. */
    sigset_t all, prev;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &prev);
    pid_t pid = fork();
    if (pid == 0)
        child_main(rank, outp[1], errp[1], rep[1]);
    int fork_err = errno;
    sigprocmask(SIG_SETMASK, &prev, NULL);
    close(outp[1]);
    close(errp[1]);
    close(rep[1]);
    if (pid < 0) {
        close(outp[0]);
        close(errp[0]);
        close(rep[0]);
        say("cannot start rank %d: fork: %s", rank, strerror(fork_err));
        return TR_EXIT_INTERNAL;
    }
    setpgid(pid, pid); /* as the child does; whichever runs first, the group exists before exec */
    if (rank == 0 && tr.relay_r >= 0) {
        close(tr.relay_r); /* rank 0 holds the only read end now, so its exit gives us EPIPE */
        tr.relay_r = -1;
    }

    r->pid = pid;
    r->alive = true;
    tr.live++;
    int fds[2] = {outp[0], errp[0]};
    for (int k = 0; k < 2; k++) {
        fcntl(fds[k], F_SETFL, fcntl(fds[k], F_GETFL) | O_NONBLOCK);
        r->out[k].fd = fds[k];
    }

    /* EOF: the exec closed the close-on-exec write end. A full report: the child failed. */
    tr_child_report_t report;
    ssize_t n;
    do
        n = read(rep[0], &report, sizeof report);
    while (n < 0 && errno == EINTR);
    close(rep[0]);
    if (n != (ssize_t)sizeof report)
        return 0;

    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    r->alive = false;
    r->pid = 0; /* it never ran PROGRAM: count it as not started */
    tr.live--;
    stream_close(&r->out[0]);
    stream_close(&r->out[1]);
    if (report.stage == TR_STAGE_EXEC) {
        say("cannot run '%s': %s", tr.prog_argv[0], strerror(report.err));
        return report.err == ENOENT || report.err == ENOTDIR ? TR_EXIT_NOTFOUND : TR_EXIT_NOEXEC;
    }
    say("cannot set up rank %d (%s): %s", rank,
        report.stage == TR_STAGE_STDIO ? "stdin/stdout/stderr" : "environment",
        strerror(report.err));
    return TR_EXIT_INTERNAL;
}

/* ------------------------------------------------------------------------------- main */

/* A whole number from lo to hi given to option name, or a usage error saying what it counts. */
static int parse_count(const char *name, const char *val, long lo, long hi, const char *what)
{
    char *end;
    long n = 0;
    errno = 0;
    if (val[0] >= '0' && val[0] <= '9')
        n = strtol(val, &end, 10);
    if (!(val[0] >= '0' && val[0] <= '9') || *end != '\0' || errno != 0 || n < lo || n > hi)
        usage_error("%s: expected %s from %ld to %ld, got '%s'", name, what, lo, hi, val);
    return (int)n;
}

static void parse_args(int argc, char **argv)
{
    bool have_n = false;
    tr.prefix = true;
    tr.grace_s = 3.0;
    tr.rank_multiple = 1;
    bool have_multiple = false;
    int i;
    for (i = 1; i < argc; i++) {
        char *a = argv[i];
        const char *val = NULL;
        const char *name = a;
        char namebuf[32];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* PROGRAM: everything from here on belongs to it */
        if (strcmp(a, "-np") == 0) {
            name = "--np";
        } else if (a[1] == '-') {
            char *eq = strchr(a, '=');
            if (eq != NULL) {
                size_t len = (size_t)(eq - a);
                if (len >= sizeof namebuf)
                    usage_error("unknown option '%s'", a);
                memcpy(namebuf, a, len);
                namebuf[len] = '\0';
                name = namebuf;
                val = eq + 1;
            }
        } else if (a[2] != '\0') {
            namebuf[0] = '-'; /* "-n4", "-xNAME=VALUE" */
            namebuf[1] = a[1];
            namebuf[2] = '\0';
            name = namebuf;
            val = a + 2;
        }

        bool takes_value = strcmp(name, "-n") == 0 || strcmp(name, "--np") == 0 ||
                           strcmp(name, "-x") == 0 || strcmp(name, "--timeout") == 0 ||
                           strcmp(name, "--grace") == 0 || strcmp(name, "--restart") == 0 ||
                           strcmp(name, "--min-ranks") == 0 ||
                           strcmp(name, "--rank-multiple") == 0;
        if (takes_value && val == NULL) {
            if (i + 1 >= argc)
                usage_error("option '%s' needs a value", name);
            val = argv[++i];
        } else if (!takes_value && val != NULL) {
            usage_error("unknown option '%s'", a);
        }

        if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
            usage_full();
            exit(0);
        } else if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
            util_print_version("tempo-run");
            exit(0);
        } else if (strcmp(name, "-n") == 0 || strcmp(name, "--np") == 0) {
            tr.nranks = parse_count(name, val, 1, TR_MAX_RANKS, "a number of ranks");
            have_n = true;
        } else if (strcmp(name, "--restart") == 0) {
            tr.restarts = parse_count(name, val, 0, 1000000, "a number of restarts");
        } else if (strcmp(name, "--min-ranks") == 0) {
            tr.min_ranks = parse_count(name, val, 1, TR_MAX_RANKS, "a number of ranks");
        } else if (strcmp(name, "--rank-multiple") == 0) {
            tr.rank_multiple = parse_count(name, val, 1, TR_MAX_RANKS, "a number of ranks");
            have_multiple = true;
        } else if (strcmp(name, "-x") == 0) {
            const char *eq = strchr(val, '=');
            bool ok = eq != NULL && eq != val &&
                      ((val[0] >= 'A' && val[0] <= 'Z') || (val[0] >= 'a' && val[0] <= 'z') ||
                       val[0] == '_');
            for (const char *c = val; ok && c < eq; c++)
                ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                     (*c >= '0' && *c <= '9') || *c == '_';
            if (!ok)
                usage_error("-x '%s': expected NAME=VALUE, NAME made of letters, digits and _ "
                            "(the environment is inherited anyway)",
                            val);
            static const char *const own[] = {"TEMPO_RANK", "TEMPO_SIZE", "TEMPO_LOCAL_RANK",
                                              "TEMPO_LOCAL_SIZE", "TEMPO_RESTART"};
            for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
                if ((size_t)(eq - val) == strlen(own[k]) &&
                    strncmp(val, own[k], strlen(own[k])) == 0)
                    usage_error("-x '%s': tempo-run sets %s itself", val, own[k]);
            /* val points into argv, which lives as long as the process: putenv may keep it. */
            putenv((char *)val);
        } else if (strcmp(name, "--timeout") == 0 || strcmp(name, "--grace") == 0) {
            bool is_timeout = name[2] == 't';
            char *end;
            double d = -1;
            errno = 0;
            if ((val[0] >= '0' && val[0] <= '9') || val[0] == '.')
                d = strtod(val, &end);
            if (d < 0 || *end != '\0' || errno != 0 || d > 1e7 || (is_timeout && d <= 0))
                usage_error("%s: expected seconds (a number %s 0 and at most 1e7), got '%s'", name,
                            is_timeout ? ">" : ">=", val);
            if (is_timeout)
                tr.timeout_s = d;
            else
                tr.grace_s = d;
        } else if (strcmp(name, "--no-prefix") == 0) {
            tr.prefix = false;
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (!have_n)
        usage_error("missing -n N, the number of ranks");
    if ((tr.min_ranks != 0 || have_multiple) && tr.restarts == 0)
        usage_error("--min-ranks and --rank-multiple apply to restarts: pass --restart N too");
    if (have_multiple && tr.min_ranks == 0)
        usage_error("--rank-multiple %d: pass --min-ranks M too (without it a restart keeps -n %d)",
                    tr.rank_multiple, tr.nranks);
    if (tr.min_ranks > tr.nranks || tr.min_ranks % tr.rank_multiple != 0)
        usage_error("--min-ranks %d: expected a multiple of --rank-multiple %d, at most -n %d",
                    tr.min_ranks, tr.rank_multiple, tr.nranks);
    tr.max_ranks = tr.nranks;
    if (i >= argc)
        usage_error("missing PROGRAM");
    tr.prog_argv = argv + i;
}

/* fds 0-2 must be open, or the pipes we create could land on them and be clobbered by dup2. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd)
            exit(TR_EXIT_INTERNAL);
}

/* Descriptors tempo-run inherited beyond 0-2 must not reach the ranks: a stray pipe end would keep
   someone else's reader waiting for an EOF until the whole job ends. */
static void cloexec_inherited(void)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
#endif
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end;
            long fd = strtol(e->d_name, &end, 10);
            if (*end == '\0' && e->d_name[0] != '\0' && fd > 2 && fd != dirfd(d))
                fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        }
        closedir(d);
        return;
    }
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = 3; fd < max; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Two pipes per rank stay open here; 4096 ranks need more than the usual soft limit of 1024. */
static void raise_nofile_limit(void)
{
    rlim_t need = (rlim_t)tr.nranks * 2 + 64;
    if (getrlimit(RLIMIT_NOFILE, &tr.orig_nofile) != 0 ||
        tr.orig_nofile.rlim_cur == RLIM_INFINITY || tr.orig_nofile.rlim_cur >= need)
        return;
    struct rlimit rl = tr.orig_nofile;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        tr.nofile_raised = true;
}

/* Once, before the first launch: whether the key and the rendezvous are ours to make (per attempt,
   setup_attempt) or the user's, kept for every attempt. */
static void setup_env(void)
{
    if (unsetenv("TEMPO_ROOT_FD") != 0) { /* an outer job's socket is not this job's */
        say("cannot set up the environment: %s", strerror(errno));
        exit(TR_EXIT_INTERNAL);
    }
    const char *key = getenv("TEMPO_AUTH_KEY"), *key_file = getenv("TEMPO_AUTH_KEY_FILE");
    tr.own_key = TEMPO_HAVE_CRYPTO && (key == NULL || key[0] == '\0') &&
                 (key_file == NULL || key_file[0] == '\0');
    const char *root = getenv("TEMPO_ROOT");
    tr.own_root = root == NULL || root[0] == '\0'; /* the user's address (maybe from -x) wins */
}

/* A job key of its own (256 random bits) into TEMPO_AUTH_KEY: strangers on this host cannot join
   the job at its rendezvous (core/auth.h). 0, or -1 with errno. */
static int new_key(void)
{
    unsigned char r[32];
    char hex[2 * sizeof r + 1];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = getrandom(r + got, sizeof r - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(hex + 2 * i, 3, "%02x", r[i]);
    return setenv("TEMPO_AUTH_KEY", hex, 1);
}

/* The rendezvous socket, bound and listening here and handed to rank 0 (child_main): a port found
   free and released for rank 0 to bind later can be taken in between by any socket of the machine
   (under make check -j16, 3 jobs in 1920 failed so: "Address already in use"). Ranks that start
   before rank 0 queue in its backlog. A new one per attempt: the last one's backlog may still hold
   connections of the attempt that failed. */
static void listen_root(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(s, tr.nranks < SOMAXCONN ? SOMAXCONN : tr.nranks) != 0 ||
        getsockname(s, (struct sockaddr *)&sa, &len) != 0) {
        say("cannot listen on 127.0.0.1 for TEMPO_ROOT: %s", strerror(errno));
        exit(TR_EXIT_INTERNAL);
    }
    tr.root_fd = s;
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    if (setenv("TEMPO_ROOT", addr, 1) != 0) {
        say("cannot set up the environment: %s", strerror(errno));
        exit(TR_EXIT_INTERNAL);
    }
}

/* Each attempt's environment: its size, TEMPO_RESTART, and a key and rendezvous of its own. */
static void setup_attempt(void)
{
    char num[16], k[16];
    snprintf(num, sizeof num, "%d", tr.nranks);
    snprintf(k, sizeof k, "%d", tr.attempt);
    if (setenv("TEMPO_SIZE", num, 1) != 0 || setenv("TEMPO_LOCAL_SIZE", num, 1) != 0 ||
        setenv("TEMPO_RESTART", k, 1) != 0 || (tr.own_key && new_key() != 0)) {
        say("cannot set up the environment: %s", strerror(errno));
        exit(TR_EXIT_INTERNAL);
    }
    if (tr.own_root)
        listen_root();
}

static void setup_ranks(void)
{
    size_t n = (size_t)tr.nranks;
    tr.ranks = calloc(n, sizeof *tr.ranks);
    tr.list = malloc(n * 7 + 16);
    tr.pfds = calloc(2 * n + 2, sizeof *tr.pfds);
    tr.pfd_streams = calloc(2 * n + 2, sizeof *tr.pfd_streams);
    if (tr.ranks == NULL || tr.list == NULL || tr.pfds == NULL || tr.pfd_streams == NULL) {
        say("out of memory for %d ranks", tr.nranks);
        exit(TR_EXIT_INTERNAL);
    }
    for (int i = 0; i < tr.nranks; i++) {
        tr_rank_t *r = &tr.ranks[i];
        r->prefix_len = (size_t)snprintf(r->prefix, sizeof r->prefix, "[%d] ", i);
        for (int k = 0; k < 2; k++) {
            r->out[k].fd = -1;
            r->out[k].out_fd = k + 1;
            r->out[k].rank = i;
        }
    }
}

static void event_loop(void)
{
    while (tr.live > 0) {
        close_dead_sinks();
        nfds_t nfds = 0;
        tr.pfds[nfds] = (struct pollfd){.fd = tr.sig_rfd, .events = POLLIN};
        tr.pfd_streams[nfds++] = NULL;
        int relay_slot = -1;
        if (tr.relay_w >= 0 && tr.relay_off < tr.relay_len) {
            relay_slot = (int)nfds;
            tr.pfds[nfds] = (struct pollfd){.fd = tr.relay_w, .events = POLLOUT};
            tr.pfd_streams[nfds++] = NULL;
        } else if (relay_wants_stdin()) {
            relay_slot = (int)nfds;
            tr.pfds[nfds] = (struct pollfd){.fd = 0, .events = POLLIN};
            tr.pfd_streams[nfds++] = NULL;
        }
        for (int i = 0; i < tr.nranks; i++) {
            for (int k = 0; k < 2; k++) {
                tr_stream_t *s = &tr.ranks[i].out[k];
                if (s->fd < 0)
                    continue;
                tr.pfds[nfds] = (struct pollfd){.fd = s->fd, .events = POLLIN};
                tr.pfd_streams[nfds++] = s;
            }
        }

        int n = poll(tr.pfds, nfds, next_timeout_ms());
        if (n < 0 && errno != EINTR)
            fatal("poll", errno);
        if (n > 0) {
            /* Output first, then exits: a rank's last lines precede any report about it. */
            for (nfds_t i = 1; i < nfds; i++) {
                tr_stream_t *s = tr.pfd_streams[i];
                if (s == NULL || tr.pfds[i].revents == 0 || s->fd != tr.pfds[i].fd)
                    continue;
                stream_pump(&tr.ranks[s->rank], s);
            }
            if (relay_slot >= 0 && tr.pfds[relay_slot].revents != 0) {
                if (tr.pfds[relay_slot].fd == 0)
                    relay_read();
                else
                    relay_flush();
            }
            if (tr.pfds[0].revents != 0)
                handle_signals();
        }
        check_deadlines();
    }
}

/* One launch of the job at tr.nranks ranks, until every rank is reaped; its result in tr. */
static void run_attempt(void)
{
    tr.live = 0;
    tr.ending = tr.killed = tr.have_result = tr.restartable = false;
    tr.exit_code = 0;
    tr.timeout_at = tr.kill_at = tr.failed_at = 0;
    tr.why[0] = '\0';
    for (int i = 0; i < tr.max_ranks; i++) {
        tr_rank_t *r = &tr.ranks[i];
        r->pid = 0;
        r->alive = r->ended = r->reaped = r->failed = false;
        r->caused = 0;
    }
    setup_attempt();
    setup_stdin();

    tr.started_at = now_ns();
    if (tr.timeout_s > 0)
        tr.timeout_at = tr.started_at + (int64_t)(tr.timeout_s * 1e9);
    tr.starting = true;
    for (int i = 0; i < tr.nranks && !tr.ending; i++) {
        int rc = start_rank(i);
        if (rc != 0) {
            set_result(rc);
            start_ending();
        }
        handle_signals(); /* a rank that already failed, or a ^C, stops the launch early */
    }
    tr.starting = false;
    if (tr.root_fd >= 0) { /* rank 0 has its copy (or never started) */
        close(tr.root_fd);
        tr.root_fd = -1;
    }
    if (tr.relay_r >= 0) { /* rank 0 never started: nobody to relay stdin to */
        close(tr.relay_r);
        tr.relay_r = -1;
        relay_close();
    }

    event_loop();

    /* Every rank is reaped. What they wrote is in the pipes; take it, but do not wait for EOF:
       a grandchild may hold a pipe open for as long as it likes. */
    for (int i = 0; i < tr.nranks; i++) {
        tr_rank_t *r = &tr.ranks[i];
        drain_rank(r);
        for (int k = 0; k < 2; k++) {
            stream_lines(r, &r->out[k], true);
            stream_close(&r->out[k]);
        }
    }
    relay_close();
    int n = format_ranks(rank_is_ended);
    if (n > 0)
        say("ended rank%s %s", n == 1 ? "" : "s", tr.list);
    n = format_ranks(rank_not_started);
    if (n > 0 && n < tr.nranks) /* none started: the launch error said it all */
        say("did not start rank%s %s", n == 1 ? "" : "s", tr.list);
}

static bool rank_failed(const tr_rank_t *r) { return r->failed; }
static bool rank_failed_by_signal(const tr_rank_t *r)
{
    return r->failed && WIFSIGNALED(r->status);
}

/* After a failed attempt: whether to launch again, and at how many ranks (tr.nranks), saying so in
   one line. --min-ranks drops the ranks that failed on their own (a timeout names none; of
   several, those killed by a signal if any: the others likely exited on losing them), rounds
   down to a multiple of --rank-multiple and never goes below --min-ranks. */
static bool restart_next(void)
{
    if (tr.restarts == 0 || !tr.have_result || tr.exit_code == 0)
        return false; /* done (a job whose ranks all exit 0 is a success, whatever ended them) */
    if (!tr.restartable || tr.interrupted) {
        say("not restarting: %s", tr.interrupted ? "the job was interrupted"
                                  : tr.exit_code == TR_EXIT_USAGE
                                      ? "a rank exited with status 2 (a usage error or a refusal: "
                                        "it would fail again)"
                                      : "it could not be launched");
        return false;
    }
    if (tr.attempt >= tr.restarts) {
        say("no restart left (--restart %d): exit status %d", tr.restarts, tr.exit_code);
        return false;
    }
    int was = tr.nranks, n = was;
    char size[64] = "", dropped[80] = "";
    if (tr.min_ranks > 0) {
        int nfailed = format_ranks(rank_failed_by_signal);
        if (nfailed == 0)
            nfailed = format_ranks(rank_failed);
        n = (was - nfailed) / tr.rank_multiple * tr.rank_multiple;
        if (n < tr.min_ranks)
            n = tr.min_ranks;
        if (n < was)
            snprintf(dropped, sizeof dropped, ", without failed rank%s %.40s",
                     nfailed == 1 ? "" : "s", tr.list);
        else if (nfailed > 0)
            snprintf(dropped, sizeof dropped, " (--min-ranks %d)", tr.min_ranks);
    }
    if (n != was)
        snprintf(size, sizeof size, " on %d rank%s (was %d)", n, n == 1 ? "" : "s", was);
    tr.attempt++;
    say("restart %d of %d%s: %s at %.1f s; relaunching %d rank%s%s", tr.attempt, tr.restarts,
        size, tr.why, (double)(tr.failed_at - tr.started_at) * 1e-9, n, n == 1 ? "" : "s",
        dropped);
    tr.nranks = n;
    return true;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    ensure_std_fds();
    cloexec_inherited();
    raise_nofile_limit();
    setup_env();
    setup_ranks();
    tr.self = getpid();
    setup_signals();

    do
        run_attempt();
    while (restart_next());
    return tr.have_result ? tr.exit_code : 0;
}
