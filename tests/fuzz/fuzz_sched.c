/*
 * fuzz_sched.c — the scheduled lane's control messages from a peer (collectives/schedq.c): a
 * header (magic, type, entry count, sender), then POST entries (a rank's report of a request: its
 * collective, dtype, op, rejected flag, name) for the coordinator, or START entries (the
 * coordinator's chunk decisions: offset, count, chunk of nchunks) or a FAIL text for the others.
 *
 * Input: a flag byte (bit 0: this rank is the coordinator), the sender's comm rank (a byte, 0..3),
 * the local request a START names (u64 count, u32 nchunks cut so far, u32 chunks started), then
 * the message (TEMPO__SQ_CTRL_BYTES, zeros past the input), handed to tempo__sq_ctrl_check and,
 * for each START entry, tempo__sq_chunk_check (the checks handle() and start_local() make before
 * any entry is used). What must hold: no crash or overrun; an accepted message has the magic,
 * the sender's rank, a type this rank receives and 1..max entries, and nvalid counts the POST
 * entries before the first bad one (all of them when none is); an accepted START entry names a
 * chunk in range whose elements lie inside the request.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "collectives/coll.h"

/* The layouts of schedq.c's hdr_t, post_ent_t and start_ent_t, as this target reads them. */
#define MAGIC 0x71536574u
#define HDR 16
#define POST_ENT 64
#define START_ENT 56
#define POST_MAX ((TEMPO__SQ_CTRL_BYTES - HDR) / POST_ENT)
#define START_MAX ((TEMPO__SQ_CTRL_BYTES - HDR) / START_ENT)

static uint64_t u64_at(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t u32_at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    int coord = fuzz_u8(&in) & 1, peer = fuzz_u8(&in) % 4;
    uint64_t count;
    fuzz_take(&in, &count, 8);
    uint32_t nchunks = fuzz_u32(&in), started = fuzz_u32(&in);
    uint8_t *msg = malloc(TEMPO__SQ_CTRL_BYTES); /* exactly a message: ASan sees reads past it */
    fuzz_take(&in, msg, TEMPO__SQ_CTRL_BYTES);
    uint16_t type, n;
    memcpy(&type, msg + 4, 2);
    memcpy(&n, msg + 6, 2);
    int nvalid = -1;
    const char *bad = tempo__sq_ctrl_check(msg, peer, coord, &nvalid);
    if (nvalid < 0 || (type != 1 && nvalid != 0) || (type == 1 && nvalid > n) || (bad && !bad[0])) {
        abort();
    }
    if (!bad) {
        int32_t from;
        memcpy(&from, msg + 8, 4);
        if (u32_at(msg) != MAGIC || from != peer || (coord ? type != 1 : type != 2 && type != 3) ||
            (type == 1 && (n == 0 || n > POST_MAX || nvalid != n)) ||
            (type == 2 && (n == 0 || n > START_MAX))) {
            abort();
        }
    }
    for (int i = 0; !bad && type == 2 && i < n; i++) {
        const uint8_t *se = msg + HDR + (size_t)i * START_ENT;
        uint64_t off = u64_at(se + 8), cnt = u64_at(se + 16);
        uint32_t chunk = u32_at(se + 28), nch = u32_at(se + 32);
        if (tempo__sq_chunk_check(se, count, nchunks, started) == NULL && (nch || count) &&
            (chunk >= nch || chunk != started || (nchunks && nch != nchunks) || cnt == 0 ||
             off > count || cnt > count - off)) {
            abort();
        }
    }
    free(msg);
    return 0;
}

#ifdef FUZZ_SEEDS
static void fuzz_seeds(void)
{
    /* POST to the coordinator from rank 1: 1 and 3 entries (allreduce, all-gather, a rejected
     * one); START to rank 0 from rank 0: chunks 0 and 1 of 4 of a 1000-element request; FAIL */
    for (int k = 0; k < 4; k++) {
        static uint8_t b[18 + TEMPO__SQ_CTRL_BYTES];
        memset(b, 0, sizeof(b));
        int type = k < 2 ? 1 : k == 2 ? 2 : 3, n = k == 0 ? 1 : k == 3 ? 11 : 3;
        uint64_t count = 1000;
        uint32_t nchunks = 4, started = 0;
        b[0] = type == 1;
        b[1] = type == 1;
        memcpy(b + 2, &count, 8);
        memcpy(b + 10, &nchunks, 4);
        memcpy(b + 14, &started, 4);
        uint8_t *m = b + 18;
        uint32_t magic = MAGIC;
        uint16_t t = (uint16_t)type, nn = (uint16_t)n;
        int32_t from = b[1];
        memcpy(m, &magic, 4);
        memcpy(m + 4, &t, 2);
        memcpy(m + 6, &nn, 2);
        memcpy(m + 8, &from, 4);
        for (int i = 0; type == 1 && i < n; i++) {
            uint8_t *e = m + HDR + i * POST_ENT;
            uint64_t tag = 7 + (uint64_t)i, cnt = 1000;
            memcpy(e, &tag, 8);
            memcpy(e + 8, &cnt, 8);
            e[32] = i == 1 ? TEMPO__COLL_ALLGATHER : TEMPO__COLL_ALLREDUCE; /* coll */
            e[33] = TEMPO_FLOAT32;
            e[34] = TEMPO_SUM;
            e[36] = i == 2; /* rejected */
            memcpy(e + 37, "grad.w", 6);
        }
        for (int i = 0; type == 2 && i < n; i++) {
            uint8_t *e = m + HDR + i * START_ENT;
            uint64_t tag = 7, off = 250 * (uint64_t)i, cnt = 250;
            uint32_t chunk = (uint32_t)i, nch = 4, seq = (uint32_t)i;
            memcpy(e, &tag, 8);
            memcpy(e + 8, &off, 8);
            memcpy(e + 16, &cnt, 8);
            memcpy(e + 28, &chunk, 4);
            memcpy(e + 32, &nch, 4);
            memcpy(e + 36, &seq, 4);
        }
        if (type == 3) {
            memcpy(m + HDR, "rank 2 failed", 13);
        }
        fuzz_seed(b, 18 + HDR + (type == 1 ? n * POST_ENT : type == 2 ? n * START_ENT : 13));
    }
}
#endif
