/*
 * test_bootstrap.c — launcher detection (tempo__launch_detect in core/bootstrap.c): rank and size
 * from an explicit config, TEMPO_RANK/TEMPO_SIZE, Open MPI, MPICH/Hydra (PMI) and Slurm variables
 * in that order of precedence; inconsistent or malformed values rejected with TEMPO_ERR_BOOTSTRAP
 * (TEMPO_* values out of their range, TEMPO_ERR_INVALID, by the configuration table);
 * the local size; the rendezvous address; and the job key that keeps concurrent jobs apart.
 *
 * TEMPO_* variables are read once per process through the configuration table, so every case runs
 * in a forked child with a clean environment (tu_fork) and sends back what it detected.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "core/bootstrap.h"
#include "core/cfg.h"
#include "tests/unit/tu.h"

typedef struct {
    const char *env[8][2];
    const tempo_config_t *cfg;
} case_t;

typedef struct {
    int cfg_status;
    int status;
    int rank, size, local_size, has_root;
    int ppid;
    char source[96];
    char job_key[320];
    char root[256];
    char msg[TEMPO_ERRMSG_LEN];
} result_t;

static int detect_child(void *arg, int fd)
{
    const case_t *c = arg;
    result_t r;
    memset(&r, 0, sizeof(r));
    tu_clean_env();
    for (int i = 0; i < 8 && c->env[i][0]; i++) {
        setenv(c->env[i][0], c->env[i][1], 1);
    }
    r.cfg_status = tempo__config_load();
    tempo__launch_t l;
    memset(&l, 0x5a, sizeof(l));
    r.status = r.cfg_status == TEMPO_OK ? tempo__launch_detect(c->cfg, &l) : r.cfg_status;
    snprintf(r.msg, sizeof(r.msg), "%s", tempo__errmsg());
    if (r.status == TEMPO_OK) {
        r.rank = l.rank;
        r.size = l.size;
        r.local_size = l.local_size;
        r.has_root = l.has_root;
        snprintf(r.source, sizeof(r.source), "%s", l.source);
        snprintf(r.job_key, sizeof(r.job_key), "%s", l.job_key);
        snprintf(r.root, sizeof(r.root), "%s", l.root_text);
    }
    r.ppid = (int)getppid();
    tu_write(fd, &r, sizeof(r));
    return 0;
}

static result_t detect(const case_t *c)
{
    result_t r;
    memset(&r, 0, sizeof(r));
    if (tu_fork(detect_child, (void *)c, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
        r.status = 999;
        snprintf(r.msg, sizeof(r.msg), "the child failed");
    }
    return r;
}

/* Expect rank/size from source. */
static void expect(const char *what, const case_t *c, int rank, int size, const char *source)
{
    result_t r = detect(c);
    TAP_OK(r.status == TEMPO_OK && r.rank == rank && r.size == size && strstr(r.source, source),
           "%s: rank %d of %d from %s (got status %d, %d of %d from \"%s\"%s%s)", what, rank, size,
           source, r.status, r.rank, r.size, r.source, r.status ? ": " : "", r.status ? r.msg : "");
}

/* Expect TEMPO_ERR_BOOTSTRAP with needle in the message. */
static void reject(const char *what, const case_t *c, const char *needle)
{
    result_t r = detect(c);
    TAP_EQ_INT(r.status, TEMPO_ERR_BOOTSTRAP, "%s is TEMPO_ERR_BOOTSTRAP", what);
    TAP_CONTAINS(r.msg, needle, "  message: %s", r.msg);
}

static void test_sources(void)
{
    case_t none = {{{NULL}}, NULL};
    result_t r = detect(&none);
    TAP_OK(r.status == TEMPO_OK && r.rank == 0 && r.size == 1 && strstr(r.source, "single"),
           "no launcher variables: a job of one rank (status %d, %d of %d, %s)", r.status, r.rank,
           r.size, r.source);

    case_t tempo = {{{"TEMPO_RANK", "2"}, {"TEMPO_SIZE", "4"}}, NULL};
    expect("TEMPO_RANK/SIZE", &tempo, 2, 4, "TEMPO_RANK/TEMPO_SIZE");
    case_t ompi = {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, NULL};
    expect("Open MPI", &ompi, 1, 3, "Open MPI");
    case_t pmi = {{{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}}, NULL};
    expect("PMI", &pmi, 5, 6, "MPICH/Hydra");
    case_t slurm = {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, NULL};
    expect("Slurm", &slurm, 0, 2, "Slurm");

    /* Precedence: TEMPO over Open MPI over PMI over Slurm. */
    case_t p1 = {{{"TEMPO_RANK", "1"}, {"TEMPO_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "8"},
                  {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "9"}}, NULL};
    expect("all four set: TEMPO wins", &p1, 1, 2, "TEMPO_RANK");
    case_t p2 = {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"PMI_RANK", "0"},
                  {"PMI_SIZE", "8"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "9"}}, NULL};
    expect("Open MPI, PMI, Slurm: Open MPI wins", &p2, 3, 4, "Open MPI");
    case_t p3 = {{{"PMI_RANK", "0"}, {"PMI_SIZE", "8"}, {"SLURM_PROCID", "7"},
                  {"SLURM_NTASKS", "9"}}, NULL};
    expect("PMI and Slurm: PMI wins", &p3, 0, 8, "MPICH/Hydra");

    tempo_config_t cfg = {TEMPO_CONFIG_RANK, 3, 5, NULL, NULL, 0};
    case_t withcfg = {{{"TEMPO_RANK", "1"}, {"TEMPO_SIZE", "2"}}, &cfg};
    expect("an explicit config beats TEMPO_RANK/SIZE", &withcfg, 3, 5, "config");
}

static void test_inconsistent(void)
{
    case_t c1 = {{{"TEMPO_RANK", "1"}}, NULL};
    reject("TEMPO_RANK without TEMPO_SIZE", &c1, "TEMPO_RANK and TEMPO_SIZE");
    case_t c2 = {{{"TEMPO_SIZE", "4"}}, NULL};
    reject("TEMPO_SIZE without TEMPO_RANK", &c2, "TEMPO_RANK and TEMPO_SIZE");
    /* TEMPO_RANK >= TEMPO_SIZE and TEMPO_SIZE=0: refused by the configuration table itself
     * (TEMPO_ERR_INVALID naming the variable and its range), as every out-of-range value is. */
    case_t c3 = {{{"TEMPO_RANK", "4"}, {"TEMPO_SIZE", "4"}}, NULL};
    result_t r3 = detect(&c3);
    TAP_EQ_INT(r3.status, TEMPO_ERR_INVALID, "TEMPO_RANK = TEMPO_SIZE is TEMPO_ERR_INVALID");
    TAP_CONTAINS(r3.msg, "TEMPO_RANK='4' is not valid: expected an integer from 0 to TEMPO_SIZE",
                 "  message: %s", r3.msg);
    case_t c4 = {{{"TEMPO_RANK", "0"}, {"TEMPO_SIZE", "0"}}, NULL};
    result_t r4 = detect(&c4);
    TAP_EQ_INT(r4.status, TEMPO_ERR_INVALID, "TEMPO_SIZE=0 is TEMPO_ERR_INVALID");
    TAP_CONTAINS(r4.msg, "TEMPO_SIZE='0' is not valid: expected an integer from 1", "  message: %s",
                 r4.msg);
    case_t c5 = {{{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, NULL};
    reject("a non-numeric Open MPI rank", &c5, "OMPI_COMM_WORLD_RANK");
    case_t c6 = {{{"PMI_RANK", "2"}, {"PMI_SIZE", "-2"}}, NULL};
    reject("a negative PMI size", &c6, "PMI_SIZE");
    case_t c7 = {{{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "4"}}, NULL};
    reject("Slurm rank >= size", &c7, "out of range");
    case_t c8 = {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2x"}}, NULL};
    reject("a malformed Slurm size", &c8, "SLURM_NTASKS");
    {
        /* Known weakness: a launcher source with only one of its two variables is skipped silently,
         * and the process runs as a job of one rank. Open MPI always sets both, so a lone
         * OMPI_COMM_WORLD_RANK=3 means a broken environment, which should be an error. */
        case_t c = {{{"OMPI_COMM_WORLD_RANK", "3"}}, NULL};
        result_t r = detect(&c);
        TAP_OK(r.status == TEMPO_ERR_BOOTSTRAP,
                "OMPI_COMM_WORLD_RANK without OMPI_COMM_WORLD_SIZE is TEMPO_ERR_BOOTSTRAP (got "
                "status %d, rank %d of %d from %s)", r.status, r.rank, r.size, r.source);
    }
    /* TEMPO_RANK malformed: the configuration table rejects it (TEMPO_ERR_INVALID). */
    case_t c9 = {{{"TEMPO_RANK", "one"}, {"TEMPO_SIZE", "2"}}, NULL};
    result_t r = detect(&c9);
    TAP_EQ_INT(r.status, TEMPO_ERR_INVALID,
               "TEMPO_RANK=one is rejected by the configuration table");
    TAP_CONTAINS(r.msg, "TEMPO_RANK", "  message: %s", r.msg);
}

static void test_local_and_root(void)
{
    case_t l1 = {{{"TEMPO_RANK", "0"}, {"TEMPO_SIZE", "4"}, {"TEMPO_LOCAL_SIZE", "4"}}, NULL};
    result_t r = detect(&l1);
    TAP_OK(r.status == TEMPO_OK && r.local_size == 4 && !r.has_root,
           "TEMPO_LOCAL_SIZE gives the local size; no root (%d, has_root %d)", r.local_size,
           r.has_root);
    case_t l2 = {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}, NULL};
    r = detect(&l2);
    TAP_OK(r.status == TEMPO_OK && r.local_size == 2, "OMPI_COMM_WORLD_LOCAL_SIZE (%d)",
           r.local_size);
    case_t l3 = {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_NNODES", "1"}}, NULL};
    r = detect(&l3);
    TAP_OK(r.status == TEMPO_OK && r.local_size == 3, "Slurm on one node: all ranks local (%d)",
           r.local_size);
    case_t l4 = {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}, {"SLURM_NNODES", "2"}}, NULL};
    r = detect(&l4);
    TAP_OK(r.status == TEMPO_OK && r.local_size == -1, "Slurm on two nodes: local size unknown "
           "(%d)", r.local_size);
    case_t root = {{{"TEMPO_RANK", "0"}, {"TEMPO_SIZE", "2"}, {"TEMPO_ROOT", "10.0.0.1:4000"}},
                   NULL};
    r = detect(&root);
    TAP_OK(r.status == TEMPO_OK && r.has_root && strcmp(r.root, "10.0.0.1:4000") == 0,
           "TEMPO_ROOT is the rendezvous (has_root %d, \"%s\")", r.has_root, r.root);
    tempo_config_t cfg = {TEMPO_CONFIG_ROOT, 0, 0, "127.0.0.1:5", NULL, 0};
    case_t rootcfg = {{{"TEMPO_ROOT", "10.0.0.1:4000"}}, &cfg};
    r = detect(&rootcfg);
    TAP_OK(r.status == TEMPO_OK && r.has_root && strcmp(r.root, "127.0.0.1:5") == 0,
           "a config root beats TEMPO_ROOT (\"%s\")", r.root);
}

static void key(const char *what, const case_t *c, const char *want)
{
    result_t r = detect(c);
    TAP_OK(r.status == TEMPO_OK && strcmp(r.job_key, want) == 0, "job key, %s: \"%s\" (got "
           "status %d, \"%s\")", what, want, r.status, r.job_key);
}

static void test_job_key(void)
{
    case_t k1 = {{{"TEMPO_JOB_ID", "abc"}, {"SLURM_JOB_ID", "12"}, {"TEMPO_ROOT", "h:1"}}, NULL};
    key("TEMPO_JOB_ID first", &k1, "job:abc");
    case_t k2 = {{{"OMPI_MCA_ess_base_jobid", "77"}, {"SLURM_JOB_ID", "12"}}, NULL};
    key("Open MPI job id", &k2, "ompi:77");
    case_t k3 = {{{"PMIX_NAMESPACE", "ns1"}, {"TEMPO_ROOT", "h:1"}}, NULL};
    key("PMIx namespace", &k3, "ompi:ns1");
    case_t k4 = {{{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "3"}, {"TEMPO_ROOT", "h:1"}}, NULL};
    key("Slurm job and step", &k4, "slurm:12.3");
    case_t k5 = {{{"SLURM_JOB_ID", "12"}}, NULL};
    key("Slurm job without step", &k5, "slurm:12.0");
    case_t k6 = {{{"TEMPO_ROOT", "127.0.0.1:4000"}, {"PMI_PORT", "host:99"}}, NULL};
    key("the root address", &k6, "root:127.0.0.1:4000");
    case_t k7 = {{{"PMI_PORT", "host:99"}}, NULL};
    key("Hydra's PMI_PORT", &k7, "hydra:host:99");
    case_t k8 = {{{NULL}}, NULL};
    result_t r = detect(&k8);
    char want[64];
    snprintf(want, sizeof(want), "ppid:%d", r.ppid);
    TAP_EQ_STR(r.job_key, want, "job key without launcher: the parent pid");
    /* Two jobs that differ only in their id get different keys. */
    case_t a = {{{"TEMPO_JOB_ID", "a"}}, NULL}, b = {{{"TEMPO_JOB_ID", "b"}}, NULL};
    result_t ra = detect(&a), rb = detect(&b);
    TAP_OK(strcmp(ra.job_key, rb.job_key) != 0, "different job ids, different keys");
}

int main(void)
{
    test_sources();
    test_inconsistent();
    test_local_and_root();
    test_job_key();
    return tap_done();
}
