/*
 * dist.c — dist_open (the backend by name) and what the backends share. tempo is always built; mpi when configure found MPI
 * (TRAINER_HAVE_MPI), so a build without it says so instead of failing at link or run time.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/dist.h"

#ifdef TRAINER_HAVE_MPI
#define BACKENDS "tempo, mpi"
#else
#define BACKENDS "tempo"
#endif

const char *dist_backends(void)
{
    return BACKENDS;
}

double dist_ring_share(const dist_t *d)
{
    return d->size > 1 ? (double)(d->size - 1) / d->size : 0.0;
}

int dist_check_slices(const dist_t *d, const dist_group_t *groups, int ngroups, char *err,
                      size_t len)
{
    for (int g = 0; g < ngroups; g++) {
        if (groups[g].n % (size_t)d->size) {
            snprintf(err, len,
                     "ZeRO shards every group in %d equal slices, but group %s has %zu "
                     "parameters (not a multiple of %d); use --zero 0 or another --dp",
                     d->size, groups[g].name, groups[g].n, d->size);
            return -1;
        }
    }
    return 0;
}

dist_t *dist_open(const char *backend, char *err)
{
    int (*open)(dist_t *, char *) = NULL;
    if (!backend || !strcmp(backend, "tempo")) {
        open = dist_open_tempo;
    }
#ifdef TRAINER_HAVE_MPI
    if (backend && !strcmp(backend, "mpi")) {
        open = dist_open_mpi;
    }
#endif
    if (!open) {
        snprintf(err, 256, "unknown --backend '%s' (this build has: %s%s)", backend, BACKENDS,
                 strcmp(backend, "mpi") ? ""
                                        : "; mpi needs libopenmpi-dev when configure runs");
        return NULL;
    }
    dist_t *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, 256, "out of memory");
        return NULL;
    }
    if (open(d, err) != 0) {
        free(d);
        return NULL;
    }
    d->world_rank = d->rank;
    d->world_size = d->size;
    d->tp_size = 1;
    d->pp_size = 1;
    return d;
}

int dist_close(dist_t *d)
{
    int rc = d->destroy(d);
    free(d);
    return rc;
}
