/*
 * tempo-info — what this tempo build has and how it is configured (like ucx_info): the build
 * configuration (which optional dependencies are compiled in), every TEMPO_* environment variable
 * with its default, current value and meaning, the transports and the collective algorithms.
 * Uses only the public API; starts no communicator.
 */
#include "config.h"
#include "util/helpers.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tempo.h>

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tempo-info [-b] [-c] [-t] [-a] [-q] [-v] [-h]\n"
        "Print what this tempo build has and how it is configured. With no option, print all.\n"
        "  -b, --build        build configuration: optional dependencies compiled in\n"
        "  -c, --config       every TEMPO_* environment variable: the value in use, its default and\n"
        "                     meaning; a value the library refuses is marked REFUSED, with why,\n"
        "                     and the exit status is 1\n"
        "  -t, --transports   transports and whether they are usable here\n"
        "  -a, --algorithms   collective algorithms (names for TEMPO_ALGO)\n"
        "  -q, --compressors  gradient compressors and their parameters (TEMPO_COMPRESS specs)\n"
        "  -v, --version      the package version, then the library's and the header's\n"
        "  -h, --help         this text\n");
}

static void print_build(void)
{
    const tempo_build_item_t *items;
    size_t n = tempo_build_info(&items);
    printf("# Build configuration\n");
    for (size_t i = 0; i < n; i++) {
        printf("  %-12s %s\n", items[i].name, items[i].value);
    }
}

/* Every variable with the value the library uses; a refused one with why. Returns how many are
 * refused (a job with this environment would not start). */
static int print_config(void)
{
    tempo_env_var_t v;
    int refused = 0;
    printf("# Environment variables (the value in use; default -> set)\n");
    for (size_t i = 0; tempo_env_var(i, &v) == TEMPO_OK; i++) {
        if (v.error) {
            refused++;
            printf("  %s='%s'   REFUSED (default: %s)\n      %s\n", v.name, v.value,
                   v.default_value[0] ? v.default_value : "unset", v.error);
        } else {
            printf("  %s=%s", v.name, v.used);
            if (v.value) {
                printf("   (set%s%s%s; default: %s)", strcmp(v.value, v.used) ? " to '" : "",
                       strcmp(v.value, v.used) ? v.value : "", strcmp(v.value, v.used) ? "'" : "",
                       v.default_value[0] ? v.default_value : "unset");
            } else if (!v.used[0]) {
                printf("(unset)");
            }
            printf("\n");
        }
        printf("      [%s] %s\n", v.type, v.doc);
    }
    return refused;
}

static void print_transports(void)
{
    tempo_transport_info_t t;
    printf("# Transports\n");
    for (size_t i = 0; tempo_transport_info(i, &t) == TEMPO_OK; i++) {
        printf("  %-6s %-14s %s\n", t.name, t.available ? "available" : "not available", t.detail);
    }
}

static void print_algorithms(void)
{
    tempo_algorithm_info_t a;
    printf("# Collective algorithms (force with TEMPO_ALGO=collective:name,...)\n");
    for (size_t i = 0; tempo_algorithm_info(i, &a) == TEMPO_OK; i++) {
        printf("  %-15s %-14s %s\n", a.collective, a.name, a.doc);
    }
}

static void print_compressors(void)
{
    tempo_compressor_kind_t k;
    printf("# Compressors (spec \"name:key=value,...\" for TEMPO_COMPRESS or "
           "tempo_compressor_create)\n");
    for (size_t i = 0; tempo_compressor_kind(i, &k) == TEMPO_OK; i++) {
        printf("  %-9s %s%s%s\n            %s\n", k.name, k.doc, k.unbiased ? " (unbiased)" : "",
               k.reduce_scatter ? "" : " (all-reduce only)", k.params);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"build", no_argument, NULL, 'b'},
        {"config", no_argument, NULL, 'c'},
        {"transports", no_argument, NULL, 't'},
        {"algorithms", no_argument, NULL, 'a'},
        {"compressors", no_argument, NULL, 'q'},
        {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int b = 0, c = 0, t = 0, a = 0, q = 0, any = 0, ch;
    while ((ch = getopt_long(argc, argv, "bctaqvh", opts, NULL)) != -1) {
        switch (ch) {
        case 'b': b = any = 1; break;
        case 'c': c = any = 1; break;
        case 't': t = any = 1; break;
        case 'a': a = any = 1; break;
        case 'q': q = any = 1; break;
        case 'v':
            util_print_version("tempo-info");
            printf("library %s, header %d.%d.%d\n", tempo_version(), TEMPO_VERSION_MAJOR,
                   TEMPO_VERSION_MINOR, TEMPO_VERSION_PATCH);
            return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tempo-info: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!any) {
        b = c = t = a = q = 1;
    }
    printf("# tempo %s\n", tempo_version());
    if (b) {
        print_build();
    }
    int refused = 0;
    if (c) {
        refused = print_config();
    }
    if (t) {
        print_transports();
    }
    if (a) {
        print_algorithms();
    }
    if (q) {
        print_compressors();
    }
    if (refused) {
        fflush(stdout); /* the summary after the table, not inside it when both go to one file */
        fprintf(stderr, "tempo-info: %d TEMPO_* variable%s refused: tempo_comm_init_env() would "
                        "fail with TEMPO_ERR_INVALID\n",
                refused, refused == 1 ? " is" : "s are");
        return 1;
    }
    return 0;
}
