/*
 * test_ckpt.c — loading a checkpoint (trainer/ckpt.c) whose files are hostile but checksummed:
 *   a checkpoint of 8 parameters saved by 2 ranks (ZeRO-style ranges) loads back as saved;
 *   an optimizer file whose range [2^64 - 2^61, +2^61) wraps off + n to 0 and 8 x (the ranges'
 *   sum) to the bytes the file has is refused (it moved the next range's m and v 2^63 bytes
 *   outside the file, and the load read there); so is a range past the model's end, and a
 *   model.bin whose num_params x 4 wraps.
 * Files are written into a temporary directory, removed at the end.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/tap.h"
#include "trainer/ckpt.h"

#define NP 8

static char tmp[256];

/* One rank in the world: every rank agrees with itself. */
static int agree_alone(void *arg, int *failed)
{
    (void)arg;
    (void)failed;
    return 0;
}

/* Write n bytes and their checksum as dir/name. */
static void write_checked(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    uint64_t h = ckpt_checksum(p, n);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fwrite(&h, 8, 1, f) != 1 || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

/* An optimizer file of step 3 for an NP-parameter model: its ranges, then m and v as the
 * nfloat floats of mv (what the file holds, whatever the ranges say). */
static void write_optim(const char *dir, const ckpt_range_t *r, uint32_t nr, const float *mv,
                        size_t nfloat)
{
    unsigned char b[1024];
    uint32_t oh[4] = {0x54504f54u, 1, 1, nr};
    uint64_t np = NP;
    int64_t step = 3;
    memcpy(b, oh, 16);
    memcpy(b + 16, &np, 8);
    memcpy(b + 24, &step, 8);
    memcpy(b + 32, r, nr * sizeof(*r));
    memcpy(b + 32 + nr * sizeof(*r), mv, nfloat * sizeof(float));
    write_checked(dir, "optim_00001.bin", b, 32 + nr * sizeof(*r) + nfloat * sizeof(float));
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp, sizeof(tmp), "%s/tempo-test-ckpt.XXXXXX", base);
    if (mkdtemp(tmp) == NULL) {
        printf("Bail out! mkdtemp %s\n", tmp);
        return 1;
    }
    char err[CKPT_ERR_LEN], path[4096];
    ckpt_meta_t meta, got;
    memset(&meta, 0, sizeof(meta));
    meta.n_layer = 1;
    meta.n_head = 1;
    meta.channels = 4;
    meta.max_seq_len = 4;
    meta.vocab_size = 2;
    meta.num_params = NP;
    meta.step = 3;
    float params[NP], m[NP], v[NP], p2[NP], m2[NP], v2[NP];
    for (int i = 0; i < NP; i++) {
        params[i] = (float)i;
        m[i] = (float)(10 + i);
        v[i] = (float)(20 + i);
    }
    /* rank 0 owns [0, 4), "rank 1" [4, 8): two saves into the same step, as two ranks do */
    ckpt_range_t lo = {0, 4}, hi = {4, 4}, all = {0, NP};
    int rc = ckpt_save(tmp, &meta, params, &lo, 1, m, v, 2, 0, agree_alone, NULL, err);
    TAP_EQ_INT(rc, 0, "save: %s", rc ? err : "ok");
    snprintf(path, sizeof(path), "%s/step_00000003", tmp);
    float mv[8];
    memcpy(mv, m + 4, 4 * sizeof(float));
    memcpy(mv + 4, v + 4, 4 * sizeof(float));
    write_optim(path, &hi, 1, mv, 8);
    rc = ckpt_load(path, &meta, &got, p2, &all, 1, m2, v2, err);
    TAP_OK(rc == 0 && !memcmp(p2, params, sizeof(params)) && !memcmp(m2, m, sizeof(m)) &&
               !memcmp(v2, v, sizeof(v)),
           "a checkpoint of two ranks' ranges loads back as saved%s%s", rc ? ": " : "",
           rc ? err : "");

    /* [2^64 - 2^61, +2^61) and [4, +4): off + n wraps to 0, and 8 x (2^61 + 4) to the 32 bytes
     * of m and v that the file has */
    ckpt_range_t wrap[2] = {{UINT64_MAX - (UINT64_C(1) << 61) + 1, UINT64_C(1) << 61}, {4, 4}};
    write_optim(path, wrap, 2, mv, 8);
    memcpy(m2, m, sizeof(m));
    rc = ckpt_load(path, &meta, &got, p2, &all, 1, m2, v2, err);
    TAP_OK(rc != 0 && strstr(err, "outside the model") && !memcmp(m2, m, sizeof(m)),
           "a range whose end wraps past 2^64 is refused, nothing loaded (%s)",
           rc ? err : "loaded");

    ckpt_range_t past = {6, 4};
    write_optim(path, &past, 1, mv, 8);
    rc = ckpt_load(path, &meta, &got, p2, &all, 1, m2, v2, err);
    TAP_OK(rc != 0 && strstr(err, "outside the model"),
           "a range past the model's end is refused (%s)", rc ? err : "loaded");

    /* model.bin claiming 2^62 + 8 parameters: x 4 wraps to the 32 bytes it has */
    {
        ckpt_meta_t big = meta;
        big.num_params = (UINT64_C(1) << 62) + NP;
        unsigned char b[8 + sizeof(big) + NP * 4];
        uint32_t hdr[2] = {0x4c444d54u, 2};
        memcpy(b, hdr, 8);
        memcpy(b + 8, &big, sizeof(big));
        memcpy(b + 8 + sizeof(big), params, sizeof(params));
        write_checked(path, "model.bin", b, sizeof(b));
        char opt[4200];
        snprintf(opt, sizeof(opt), "%s/optim_00001.bin", path);
        unlink(opt);
        rc = ckpt_load(path, &big, &got, p2, &lo, 1, m2, v2, err);
        TAP_OK(rc != 0 && strstr(err, "bytes, not the header's"),
               "a model.bin whose parameter count x 4 wraps is refused (%s)", rc ? err : "loaded");
    }
    if (ckpt_clear(tmp, err) != 0) {
        tap_diag("%s", err);
    }
    rmdir(tmp);
    return tap_done();
}
