/*
 * test_sock.c — core/sock.c: address parsing (IPv4, [IPv6]:port, host names, bad ports, missing
 * colon or bracket), printing, ports, "any" addresses; and the blocking helpers on loopback:
 * listen/connect/accept, full send/receive, deadlines (TEMPO_ERR_TIMEOUT), a closed peer
 * (TEMPO_ERR_REMOTE) and a refused connection. Only 127.0.0.1 and ::1 are used; no name lookup
 * beyond "localhost".
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/sock.h"
#include "tests/unit/tu.h"

static void parse_ok(const char *text, int family, int port, const char *printed)
{
    tempo__addr_t a;
    memset(&a, 0xab, sizeof(a));
    tempo_status_t st = tempo__addr_parse(text, &a);
    char buf[128] = "";
    if (st == TEMPO_OK) {
        tempo__addr_str(&a, buf, sizeof(buf));
    }
    TAP_OK(st == TEMPO_OK && a.ss.ss_family == family && tempo__addr_port(&a) == port &&
               (!printed || strcmp(buf, printed) == 0),
           "parse \"%s\" -> %s (status %d, printed \"%s\": %s)", text,
           printed ? printed : "a resolved address", (int)st, buf, tempo__errmsg());
}

static void parse_bad(const char *text, const char *needle)
{
    tempo__addr_t a;
    memset(&a, 0xab, sizeof(a));
    tempo__errmsg_set("");
    tempo_status_t st = tempo__addr_parse(text, &a);
    unsigned char *b = (unsigned char *)&a;
    int untouched = 1;
    for (size_t i = 0; i < sizeof(a); i++) {
        untouched &= b[i] == 0xab;
    }
    TAP_OK(st == TEMPO_ERR_INVALID && untouched, "parse \"%s\" is TEMPO_ERR_INVALID, output "
           "untouched (status %d)", text ? text : "(null)", (int)st);
    TAP_CONTAINS(tempo__errmsg(), needle, "  message: %s", tempo__errmsg());
}

static void test_parse(void)
{
    parse_ok("127.0.0.1:4000", AF_INET, 4000, "127.0.0.1:4000");
    parse_ok("10.1.2.3:0", AF_INET, 0, "10.1.2.3:0");
    parse_ok("0.0.0.0:65535", AF_INET, 65535, "0.0.0.0:65535");
    parse_ok("[::1]:4000", AF_INET6, 4000, "[::1]:4000");
    parse_ok("[fe80::1:2]:80", AF_INET6, 80, "[fe80::1:2]:80");
    parse_ok("[::]:1", AF_INET6, 1, "[::]:1");
    parse_ok("[::ffff:127.0.0.1]:9", AF_INET6, 9, "[::ffff:127.0.0.1]:9");
    {
        tempo__addr_t a;
        tempo_status_t st = tempo__addr_parse("localhost:7777", &a);
        TAP_OK(st == TEMPO_OK && (a.ss.ss_family == AF_INET || a.ss.ss_family == AF_INET6) &&
                   tempo__addr_port(&a) == 7777,
               "parse \"localhost:7777\" resolves the name (status %d)", (int)st);
    }
    parse_bad("127.0.0.1", "host:port");
    parse_bad("127.0.0.1:", "port");
    parse_bad("127.0.0.1:65536", "port");
    parse_bad("127.0.0.1:-1", "port");
    parse_bad("127.0.0.1:80x", "port");
    parse_bad(":4000", "host:port");
    parse_bad("", "empty");
    parse_bad(NULL, "empty");
    parse_bad("[::1]4000", "[v6addr]:port");
    parse_bad("[::1", "[v6addr]:port");
    parse_bad("[::1]:", "port");
    parse_bad("[::1]:99999", "port");
    char longhost[400];
    memset(longhost, 'a', sizeof(longhost));
    memcpy(longhost + sizeof(longhost) - 4, ":80", 4);
    parse_bad(longhost, "host:port");
}

static void test_ports_any(void)
{
    tempo__addr_t a;
    tempo__addr_parse("127.0.0.1:5", &a);
    tempo__addr_set_port(&a, 4242);
    TAP_EQ_INT(tempo__addr_port(&a), 4242, "set_port/port on IPv4");
    TAP_OK(!tempo__addr_is_any(&a), "127.0.0.1 is not 'any'");
    tempo__addr_parse("[::1]:5", &a);
    tempo__addr_set_port(&a, 65535);
    TAP_EQ_INT(tempo__addr_port(&a), 65535, "set_port/port on IPv6");
    TAP_OK(!tempo__addr_is_any(&a), "::1 is not 'any'");
    tempo__addr_parse("0.0.0.0:0", &a);
    TAP_OK(tempo__addr_is_any(&a), "0.0.0.0 is 'any'");
    tempo__addr_parse("[::]:0", &a);
    TAP_OK(tempo__addr_is_any(&a), ":: is 'any'");
    char buf[128];
    tempo__addr_t odd;
    memset(&odd, 0, sizeof(odd));
    odd.ss.ss_family = AF_UNIX;
    TAP_CONTAINS(tempo__addr_str(&odd, buf, sizeof(buf)), "unknown address family",
                 "printing a non-IP address says so");
}

static void test_loopback_io(void)
{
    tempo__addr_t any, bound;
    int lfd = -1, cfd = -1, afd = -1;
    tempo__addr_parse("127.0.0.1:0", &any);
    tempo_status_t st = tempo__sock_listen(&any, &lfd, &bound);
    TAP_OK(st == TEMPO_OK && tempo__addr_port(&bound) > 0, "listen on 127.0.0.1:0 gets a port (%d)",
           tempo__addr_port(&bound));
    if (st != TEMPO_OK) {
        return;
    }
    tempo__addr_t again = bound;
    int lfd2 = -1;
    /* SO_REUSEADDR does not allow two listeners on one port: a clear bootstrap error. */
    st = tempo__sock_listen(&again, &lfd2, NULL);
    TAP_EQ_INT(st, TEMPO_ERR_BOOTSTRAP, "listening on a port in use is TEMPO_ERR_BOOTSTRAP");
    TAP_CONTAINS(tempo__errmsg(), "cannot listen", "  message: %s", tempo__errmsg());
    if (st == TEMPO_OK) {
        close(lfd2);
    }

    uint64_t soon = tempo__deadline_after(0.2);
    st = tempo__sock_accept(lfd, soon, &afd);
    TAP_EQ_INT(st, TEMPO_ERR_TIMEOUT, "accept with nobody connecting times out at the deadline");

    st = tempo__sock_connect(&bound, tempo__deadline_after(5), &cfd);
    TAP_EQ_INT(st, TEMPO_OK, "connect to the listener");
    st = tempo__sock_accept(lfd, tempo__deadline_after(5), &afd);
    TAP_EQ_INT(st, TEMPO_OK, "accept the connection");
    if (cfd < 0 || afd < 0) {
        close(lfd);
        return;
    }
    enum { N = 4 << 20 };
    char *out = malloc(N), *in = malloc(N);
    for (int i = 0; i < N; i++) {
        out[i] = (char)(i * 131 + 7);
    }
    /* 4 MiB does not fit in socket buffers: send from a child so both sides make progress. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        _exit(tempo__sock_send_all(cfd, out, N, tempo__deadline_after(20), "parent") == TEMPO_OK
                  ? 0 : 1);
    }
    st = tempo__sock_recv_all(afd, in, N, tempo__deadline_after(20), "child");
    int status = -1;
    waitpid(pid, &status, 0);
    TAP_OK(st == TEMPO_OK && status == 0 && memcmp(in, out, N) == 0,
           "4 MiB sent and received whole (status %d, sender %d)", (int)st, status);

    st = tempo__sock_recv_all(afd, in, 10, tempo__deadline_after(0.1), "the test peer");
    TAP_EQ_INT(st, TEMPO_ERR_TIMEOUT, "a receive with nothing coming times out at the deadline");
    TAP_CONTAINS(tempo__errmsg(), "the test peer", "  and names the peer: %s", tempo__errmsg());

    tempo__sock_send_all(cfd, "abc", 3, tempo__deadline_after(5), "x");
    close(cfd);
    st = tempo__sock_recv_all(afd, in, 10, tempo__deadline_after(5), "the test peer");
    TAP_EQ_INT(st, TEMPO_ERR_REMOTE, "a peer closing mid-message is TEMPO_ERR_REMOTE");
    TAP_CONTAINS(tempo__errmsg(), "closed the connection", "  message: %s", tempo__errmsg());
    close(afd);
    close(lfd);

    /* Nobody listens now: refused until the deadline. */
    uint64_t t0 = tempo__now_ns();
    st = tempo__sock_connect(&bound, tempo__deadline_after(0.3), &cfd);
    double waited = (double)(tempo__now_ns() - t0) / 1e9;
    TAP_EQ_INT(st, TEMPO_ERR_TIMEOUT, "connecting to a closed port retries, then times out");
    TAP_OK(waited < 10, "  within the deadline's reach (%.2f s, hang guard 10 s)", waited);
    free(out);
    free(in);
}

int main(void)
{
    test_parse();
    test_ports_any();
    test_loopback_io();
    return tap_done();
}
