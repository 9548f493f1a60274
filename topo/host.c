/*
 * host.c — host identity and CPU count (see host.h). hwloc-based topology discovery (NUMA, sockets,
 * devices) will join this folder; identity only needs the kernel's own facts.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/tempo_int.h"
#include "topo/host.h"

static uint64_t hash_file(const char *path, uint64_t h)
{
    char buf[128];
    FILE *f = fopen(path, "r");
    if (!f) {
        return h;
    }
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return tempo__hash64(buf, n, h);
}

static uint64_t hash_link(const char *path, uint64_t h)
{
    char buf[128];
    ssize_t n = readlink(path, buf, sizeof(buf));
    return n > 0 ? tempo__hash64(buf, (size_t)n, h) : h;
}

uint64_t tempo__host_id(const char *override, int rank)
{
    if (override && override[0]) {
        char buf[256];
        size_t o = 0;
        for (const char *p = override; *p && o + 16 < sizeof(buf); p++) {
            if (p[0] == '%' && p[1] == 'r') {
                o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%d", rank);
                p++;
            } else {
                buf[o++] = *p;
            }
        }
        return tempo__hash64(buf, o, 0x5eedull);
    }
    const char *host = tempo__hostname();
    uint64_t h = tempo__hash64(host, strlen(host), 0);
    h = hash_file("/proc/sys/kernel/random/boot_id", h);
    h = hash_link("/proc/self/ns/net", h);
    h = hash_link("/proc/self/ns/mnt", h);
    return h;
}

int tempo__host_ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
