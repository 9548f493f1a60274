/*
 * fuzz_ckpt.c — checkpoint files (trainer/ckpt.c), which a run is pointed at with --resume:
 * model.bin's header (magic, version, ckpt_meta_t) and the optimizer files' headers and range
 * indexes (optim_RRRRR.bin: nranges x (off, n) into the flat parameter layout), and `latest`.
 *
 * Input: a flag byte (bit 0: append each file's right checksum, so that the parsers behind it are
 * reached; else the file ends with its own), the number of optimizer files (next byte, 0..3),
 * up to 3 requested ranges (a count byte, then 2 x u16 each: offset and length, cut to the model),
 * then each file's length (u16) and bytes (zeros past the input): model.bin, the optimizer files,
 * `latest`. They are written into a private directory, then read with ckpt_latest, ckpt_peek and
 * ckpt_load (the model shape wanted is the one ckpt_peek reads, so the load goes past it).
 * What must hold: no crash, overrun or leak; a load that succeeds read a model.bin holding all
 * its parameters, and copied exactly the requested elements.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_files.h"

#include "trainer/ckpt.h"

#define NOPT 3
#define NREQ 3

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_dir_make();
    return 0;
}

/* The next file of the input as name: a u16 length, its bytes, and with sum its checksum. Returns
 * its size. */
static size_t take_file(fuzz_in_t *in, const char *name, int sum)
{
    size_t n = fuzz_u8(in) | (size_t)fuzz_u8(in) << 8;
    uint8_t *b = malloc(n + 8);
    fuzz_take(in, b, n);
    if (sum) {
        uint64_t h = ckpt_checksum(b, n);
        memcpy(b + n, &h, 8);
        n += 8;
    }
    char path[4096];
    fuzz_file(name, b, n, path);
    free(b);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    int sum = fuzz_u8(&in) & 1, nopt = fuzz_u8(&in) % (NOPT + 1), nreq = fuzz_u8(&in) % (NREQ + 1);
    uint16_t req[NREQ][2];
    fuzz_take(&in, req, sizeof(req));
    size_t model = take_file(&in, "model.bin", sum);
    char name[64], path[4096], err[CKPT_ERR_LEN];
    for (int i = 0; i < nopt; i++) {
        snprintf(name, sizeof(name), "optim_%05d.bin", i);
        take_file(&in, name, sum);
    }
    take_file(&in, "latest", 0);
    if (ckpt_latest(fuzz_dir, path, err) == 0 && strncmp(path + strlen(fuzz_dir), "/step_", 6)) {
        abort(); /* a name outside the directory */
    }
    ckpt_meta_t want, got;
    if (ckpt_peek(fuzz_dir, &want, err) == 0 && want.num_params <= model / sizeof(float)) {
        /* requested ranges in [0, num_params), packed in m and v */
        ckpt_range_t r[NREQ];
        size_t tot = 0, np = (size_t)want.num_params;
        for (int i = 0; i < nreq; i++) {
            r[i].off = np ? req[i][0] % np : 0;
            r[i].n = req[i][1] % (np - r[i].off + 1);
            tot += r[i].n;
        }
        float *params = malloc(np * sizeof(float) + 1), *m = malloc(tot * sizeof(float) + 1),
              *v = malloc(tot * sizeof(float) + 1);
        if (ckpt_load(fuzz_dir, &want, &got, params, r, nreq, m, v, err) == 0 &&
            (got.num_params != want.num_params || got.step != want.step)) {
            abort();
        }
        free(params);
        free(m);
        free(v);
    }
    for (int i = 0; i < nopt; i++) {
        snprintf(name, sizeof(name), "%s/optim_%05d.bin", fuzz_dir, i);
        unlink(name);
    }
    snprintf(path, sizeof(path), "%s/model.bin", fuzz_dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/latest", fuzz_dir);
    unlink(path);
    return 0;
}

#ifdef FUZZ_SEEDS
static size_t put(uint8_t *p, const void *v, size_t n)
{
    memcpy(p, v, n);
    return n;
}

/* A checkpoint of a model of np parameters at step 7, with its optimizer state in nopt files
 * that split [0, np) (file i: ranges i, i + nopt, ... of 4 elements), and requests. wrap: file
 * 0's ranges start with [2^64 - 2^61, +2^61), whose end and 8 x sum wrap (refused since 529db9d;
 * before, the load read 2^63 bytes past the file). */
static void seed(uint64_t np, int nopt, int version, int wrap)
{
    static uint8_t b[16384];
    size_t o = 0;
    b[o++] = 1;
    b[o++] = (uint8_t)nopt;
    b[o++] = 2;
    uint16_t req[NREQ][2] = {{0, (uint16_t)np}, {1, 2}, {0, 0}};
    o += put(b + o, req, sizeof(req));
    ckpt_meta_t mt;
    memset(&mt, 0, sizeof(mt));
    mt.n_layer = 1;
    mt.n_head = 1;
    mt.channels = 16;
    mt.max_seq_len = 16;
    mt.vocab_size = 256;
    mt.num_params = np;
    mt.step = 7;
    mt.dp = nopt;
    mt.batch = version == 2 ? 4 : 0;
    size_t mlen = version == 2 ? sizeof(mt) : offsetof(ckpt_meta_t, batch);
    uint16_t len = (uint16_t)(8 + mlen + np * sizeof(float));
    uint32_t hdr[4] = {0x4c444d54u, (uint32_t)version};
    o += put(b + o, &len, 2);
    o += put(b + o, hdr, 8);
    o += put(b + o, &mt, mlen);
    for (uint64_t i = 0; i < np; i++) {
        float f = (float)i * 0.25f;
        o += put(b + o, &f, 4);
    }
    for (int f = 0; f < nopt; f++) {
        uint64_t nr = 0, ranges[64][2];
        if (wrap && f == 0) {
            ranges[nr][0] = -(UINT64_C(1) << 61);
            ranges[nr][1] = UINT64_C(1) << 61;
            nr++;
        }
        for (uint64_t a = 4 * (uint64_t)f; a < np; a += 4 * (uint64_t)nopt) {
            ranges[nr][0] = a;
            ranges[nr][1] = np - a < 4 ? np - a : 4;
            nr++;
        }
        uint64_t tot = 0;
        for (uint64_t i = 0; i < nr; i++) {
            tot += ranges[i][1]; /* (mod 2^64: 8 x 2^61 is 0) */
        }
        len = (uint16_t)(32 + 16 * nr + 8 * tot);
        uint32_t oh[4] = {0x54504f54u, 1, (uint32_t)f, (uint32_t)nr};
        int64_t step = 7;
        o += put(b + o, &len, 2);
        o += put(b + o, oh, 16);
        o += put(b + o, &np, 8);
        o += put(b + o, &step, 8);
        o += put(b + o, ranges, 16 * nr);
        for (uint64_t i = 0; i < 8 * tot / 4; i++) { /* m and v: 8 x tot bytes, mod 2^64 */
            float x = (float)i;
            o += put(b + o, &x, 4);
        }
    }
    static const char latest[] = "step_00000007\n";
    len = sizeof(latest) - 1;
    o += put(b + o, &len, 2);
    o += put(b + o, latest, len);
    fuzz_seed(b, o);
}

static void fuzz_seeds(void)
{
    seed(10, 1, 2, 0);
    seed(24, 2, 2, 0);
    seed(24, 3, 2, 0);
    seed(5, 0, 1, 0);
    seed(0, 1, 2, 0);
    seed(8, 1, 2, 1);
}
#endif
