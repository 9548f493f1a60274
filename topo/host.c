/*
 * host.c — host identity and CPU count (see host.h). hwloc-based topology discovery (NUMA, sockets,
 * devices) will join this folder; identity only needs the kernel's own facts.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
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
    uint64_t h = tempo__machine_id();
    h = hash_link("/proc/self/ns/net", h);
    h = hash_link("/proc/self/ns/mnt", h);
    return h;
}

uint64_t tempo__machine_id(void)
{
    const char *host = tempo__hostname();
    return hash_file("/proc/sys/kernel/random/boot_id", tempo__hash64(host, strlen(host), 0));
}

int tempo__host_ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

size_t tempo__host_llc_bytes(void)
{
    static size_t cached;
    if (cached) {
        return cached;
    }
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) {
            break;
        }
        int level = fgets(buf, sizeof(buf), f) ? atoi(buf) : 0;
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) {
            continue;
        }
        char unit = 0;
        unsigned long v = 0;
        if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%lu%c", &v, &unit) >= 1 &&
            level >= best_level) {
            best_level = level;
            best = v * (unit == 'K' ? 1024ul : unit == 'M' ? 1048576ul : 1ul);
        }
        fclose(f);
    }
    if (!best) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        best = l3 > 0 ? (size_t)l3 : (size_t)32 << 20;
    }
    cached = best;
    return best;
}
