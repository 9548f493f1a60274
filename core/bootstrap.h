/*
 * bootstrap.h — who am I, how many are we, and where do we meet.
 *
 * tempo__launch_detect() reads rank and size from an explicit config, TEMPO_RANK/TEMPO_SIZE, Open
 * MPI, MPICH/Hydra or Slurm variables (in that order), and decides the rendezvous:
 * TEMPO_ROOT=host:port, or for a job known to sit on one host, a file named after the job key in
 * the private directory $TMPDIR/tempo-<uid> (mode 700, owner and mode checked, the file created
 * and read without following links: bootstrap.c). The rendezvous is a TCP star at rank 0 that all-gathers one fixed-size blob per rank and
 * then closes. Connections from other jobs (a different job key) are refused and do not disturb the
 * job.
 */
#ifndef TEMPO_CORE_BOOTSTRAP_H
#define TEMPO_CORE_BOOTSTRAP_H

#include "core/sock.h"

typedef struct tempo__launch {
    int rank;
    int size;
    const char *source; /* which variables gave rank and size */
    int local_size;     /* ranks on this host when the launcher says so, else -1 */
    char job_key[320];  /* identity checked at the rendezvous */
    int has_root;       /* root was given (TEMPO_ROOT or config) */
    char root_text[256];
} tempo__launch_t;

tempo_status_t tempo__launch_detect(const tempo_config_t *cfg, tempo__launch_t *launch_p);

typedef struct tempo__bootstrap tempo__bootstrap_t;

/** Rank 0 starts listening at the rendezvous; other ranks connect to it. *local_p receives the
 * local address (port 0) through which this rank reaches rank 0: the address to advertise to peers.
 */
tempo_status_t tempo__bootstrap_open(const tempo__launch_t *launch, uint64_t deadline,
                                     tempo__bootstrap_t **bs_p, tempo__addr_t *local_p);
/** Every rank contributes len bytes; *all_p (size * len bytes, rank order, tempo__free) receives
 * all. */
tempo_status_t tempo__bootstrap_allgather(tempo__bootstrap_t *bs, const void *blob, size_t len,
                                          uint64_t deadline, void **all_p);
void tempo__bootstrap_close(tempo__bootstrap_t *bs);

/* What rank 0 makes of a whole greeting at the rendezvous (the checks of bootstrap.c's root side,
 * a function of their own so that tests/fuzz/fuzz_bootstrap.c reaches them without sockets). */
enum {
    TEMPO__HELLO_JOINED = 0, /* a rank of this job, not joined before */
    TEMPO__HELLO_NOT_TEMPO,  /* a stranger: wrong magic or version (refused, the job goes on) */
    TEMPO__HELLO_NOT_AUTH,   /* a stranger: its MAC is not the job key's */
    TEMPO__HELLO_OTHER_JOB,  /* a rank of another job (job keys differ) */
    TEMPO__HELLO_BROKEN      /* a rank of this job that breaks it: size, rank, duplicate, blob */
};
#define TEMPO__BS_HELLO_BYTES 64 /* a hello without its blob and MAC */
/** msg: the greeting (hello, blob of len bytes, MAC: every byte the greeter read) answering the
 *  challenge nonce (TEMPO__AUTH_NONCE bytes); auth: the job checks MACs; key_hash: the job key's;
 *  fds: n entries, >= 0 for the ranks that joined. Returns a TEMPO__HELLO_*; the reason, but for
 *  JOINED, in why. */
int tempo__bs_hello_check(const void *msg, size_t len, const uint8_t *nonce, int auth,
                          uint64_t key_hash, const int *fds, int n, char *why, size_t why_len);

#endif /* TEMPO_CORE_BOOTSTRAP_H */
