/*
 * fuzz_qdecode.c — encoded buffers from peers (quant/: every compressor kind's decode, and the rANS
 * entropy stage's), which a compressed collective decodes as they arrive.
 *
 * Input: a kind (index into tempo__qkinds[], or one past the end: tempo__rans_decode alone), its
 * parameters (bits, bucket, zero, entropy, ratio), a coordinate count (0..4095), whether to
 * accumulate, a shared seed, then the encoded bytes (exactly the rest, in a buffer of their own
 * size, so that a read past them is seen). Level kinds get the evenly spaced table of their bits.
 * What must hold (quant.h): decode validates the length and every index before it writes; for a
 * malformed input it answers TEMPO_ERR_REMOTE and writes nothing; it never reads past the input
 * or writes past count coordinates.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "quant/quant.h"

/* The level kinds' decode (they all decode as qsgd does, with a table). */
static void *level_decode(void)
{
    for (size_t i = 0; i < tempo__nqkinds; i++) {
        if (!strcmp(tempo__qkinds[i].name, "qsgd")) {
            return (void *)tempo__qkinds[i].decode;
        }
    }
    abort();
}

/* k's spec with the parameters it takes of these (ent: none, rans, zstd), into spec (256). */
static void make_spec(const tempo__qkind_t *k, int bits, int zero, int ent, unsigned bucket,
                      double ratio, char *spec)
{
    static const char *const e[] = {"none", "rans", "zstd"};
    size_t o = (size_t)snprintf(spec, 256, "%s:seed=0", k->name);
    if (k->params & TEMPO__QP_BITS) {
        o += (size_t)snprintf(spec + o, 256 - o, ",bits=%d", bits);
    }
    if (k->params & TEMPO__QP_ZERO) {
        o += (size_t)snprintf(spec + o, 256 - o, ",zero=%d", zero);
    }
    if (k->params & TEMPO__QP_BUCKET) {
        o += (size_t)snprintf(spec + o, 256 - o, ",bucket=%u", bucket);
    }
    if (k->params & TEMPO__QP_ENTROPY) {
        o += (size_t)snprintf(spec + o, 256 - o, ",entropy=%s", e[ent]);
    }
    if (k->params & TEMPO__QP_RATIO) {
        snprintf(spec + o, 256 - o, ",ratio=%g", ratio);
    }
}

static void rans(fuzz_in_t *in)
{
    int nsym = 1 + fuzz_u8(in);
    size_t n = fuzz_u32(in) % 65536, len;
    const uint8_t *rest = fuzz_rest(in, &len);
    uint8_t *enc = malloc(len ? len : 1), *sym = malloc(n ? n : 1);
    memcpy(enc, rest, len);
    if (tempo__rans_decode(enc, len, n, nsym, sym) == TEMPO_OK) {
        for (size_t i = 0; i < n; i++) {
            if (sym[i] >= nsym) {
                abort(); /* a symbol the alphabet does not have */
            }
        }
    }
    free(enc);
    free(sym);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    size_t kind = fuzz_u8(&in) % (tempo__nqkinds + 1);
    if (kind == tempo__nqkinds) {
        rans(&in);
        return 0;
    }
    const tempo__qkind_t *k = &tempo__qkinds[kind];
    uint8_t bits = fuzz_u8(&in), zero = fuzz_u8(&in), ent = fuzz_u8(&in), ratio = fuzz_u8(&in);
    unsigned bucket = fuzz_u32(&in) % 2048;
    char spec[256];
    make_spec(k, 1 + bits % 8, zero & 1, ent % 3, 1 + bucket, (1 + ratio) / 256.0, spec);
    tempo__qparams_t p;
    if (!k->decode || tempo__qspec_parse(spec, &p) != TEMPO_OK) {
        return 0; /* (zero=1 with bits=1; powersgd decodes nothing itself) */
    }
    float levels[256];
    tempo__qctx_t c = {&p, NULL, 0, levels, 0};
    if (k->decode == level_decode()) {
        c.nlevels = tempo__qnlevels(p.bits, p.zero);
        tempo__qlevels_uniform(p.bits, p.zero, levels);
    }
    size_t count = fuzz_u32(&in) % 4096, len;
    int acc = fuzz_u8(&in) & 1;
    fuzz_take(&in, &c.shared_seed, sizeof(c.shared_seed));
    const uint8_t *rest = fuzz_rest(&in, &len);
    uint8_t *enc = malloc(len ? len : 1);
    memcpy(enc, rest, len);
    size_t bytes = (count ? count : 1) * sizeof(float);
    float *out = malloc(bytes), *was = malloc(bytes);
    for (size_t i = 0; i < count; i++) {
        out[i] = was[i] = (float)i;
    }
    tempo_status_t st = k->decode(&c, enc, len, count, out, acc);
    if (st != TEMPO_OK && (st != TEMPO_ERR_REMOTE || memcmp(out, was, count * sizeof(float)))) {
        fprintf(stderr, "%s: status %d, %s\n", spec, (int)st,
                st == TEMPO_ERR_REMOTE ? "wrote before it failed" : "not TEMPO_ERR_REMOTE");
        abort();
    }
    free(enc);
    free(out);
    free(was);
    return 0;
}

#ifdef FUZZ_SEEDS
/* An encoded vector of each kind, from its own encode (count 300: several buckets and a partial
 * one), with the header fields the target reads before it. */
static void fuzz_seeds(void)
{
    enum { COUNT = 300 };
    float v[COUNT];
    for (int i = 0; i < COUNT; i++) {
        v[i] = (float)((i * 37) % 101 - 50) / 25.0f;
    }
    for (size_t kind = 0; kind < tempo__nqkinds; kind++) {
        for (int ent = 0; ent < 3; ent++) {
            const tempo__qkind_t *k = &tempo__qkinds[kind];
            if (!k->decode || (ent && !(k->params & TEMPO__QP_ENTROPY))) {
                continue;
            }
            uint8_t head[1 + 4 + 4 + 4 + 1 + 8] = {(uint8_t)kind, 2, 1, (uint8_t)ent, 63};
            uint32_t bucket = 127, count = COUNT; /* bucket=128, ratio=0.25 */
            memcpy(head + 5, &bucket, 4);
            memcpy(head + 9, &count, 4);
            head[13] = (uint8_t)(kind & 1); /* accumulate */
            uint64_t shared = 42;
            memcpy(head + 14, &shared, 8);
            char spec[256]; /* the spec the target makes from those bytes */
            make_spec(k, 3, 1, ent, 128, 0.25, spec);
            tempo__qparams_t p;
            if (tempo__qspec_parse(spec, &p) != TEMPO_OK) {
                fprintf(stderr, "%s: %s\n", spec, tempo__errmsg());
                exit(1);
            }
            float levels[256];
            tempo__rng_t rng;
            tempo__rng_seed(&rng, 1, 2);
            tempo__qctx_t c = {&p, &rng, shared, levels, 0};
            if (k->decode == level_decode()) {
                c.nlevels = tempo__qnlevels(p.bits, p.zero);
                tempo__qlevels_uniform(p.bits, p.zero, levels);
            }
            size_t cap = k->bound(&p, COUNT);
            uint8_t *b = malloc(sizeof(head) + cap);
            memcpy(b, head, sizeof(head));
            size_t n = k->encode(&c, v, COUNT, b + sizeof(head));
            fuzz_seed(b, sizeof(head) + n);
            free(b);
        }
    }
    /* rANS alone: 200 symbols of 4 */
    uint8_t sym[200], b[1 + 1 + 4 + 1024] = {(uint8_t)tempo__nqkinds, 3, 200};
    for (int i = 0; i < 200; i++) {
        sym[i] = (uint8_t)((i * i) % 7 % 4);
    }
    size_t n = tempo__rans_encode(sym, 200, 4, b + 6, 1024);
    fuzz_seed(b, 6 + n);
}
#endif
