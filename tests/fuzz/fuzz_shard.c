/*
 * fuzz_shard.c — corpus files (trainer/data.c's data_corpus_load): llm.c token shards (a header
 * of 256 int32: magic, version, token count; then the uint16 tokens) and byte-level text, files
 * a run is pointed at.
 *
 * Input: a flag byte (bit 0: the file is named shard.bin, read as a shard whatever it holds;
 * else corpus, a shard only if it starts with the magic), a vocabulary size (2 bytes, 1..65536),
 * then the file's bytes. What must hold: no crash, overrun or leak; a corpus that loads has
 * every token below the vocabulary, and a shard's token count is what its header says.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_files.h"

#include "trainer/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_dir_make();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    int bin = fuzz_u8(&in) & 1;
    int vocab = 1 + (fuzz_u8(&in) | fuzz_u8(&in) << 8);
    size_t n;
    const uint8_t *bytes = fuzz_rest(&in, &n);
    char path[4096], err[DATA_ERR_LEN];
    fuzz_file(bin ? "shard.bin" : "corpus", bytes, n, path);
    data_corpus_t c;
    if (data_corpus_load(path, vocab, &c, err) == 0) {
        for (size_t i = 0; i < c.n; i++) {
            if (c.tok[i] >= vocab) {
                abort();
            }
        }
        if (c.shards && c.n != (n - DATA_SHARD_HEADER_BYTES) / 2) {
            abort();
        }
        data_corpus_free(&c);
    }
    unlink(path);
    return 0;
}

#ifdef FUZZ_SEEDS
static void fuzz_seeds(void)
{
    /* shards of 0, 5 and 40 tokens (named .bin, or found by their magic), and text */
    for (int k = 0; k < 4; k++) {
        static uint8_t b[3 + 1024 + 80];
        int ntok = k == 0 ? 0 : k == 1 ? 5 : 40;
        int32_t hdr[256] = {DATA_SHARD_MAGIC, DATA_SHARD_VERSION, ntok};
        b[0] = (uint8_t)(k & 1);
        b[1] = 0xff;
        b[2] = 0xc3; /* vocab 50176 */
        memcpy(b + 3, hdr, sizeof(hdr));
        for (int i = 0; i < ntok; i++) {
            uint16_t t = (uint16_t)(i * 997 % 50000);
            memcpy(b + 3 + 1024 + 2 * i, &t, 2);
        }
        fuzz_seed(b, 3 + 1024 + 2 * (size_t)ntok);
    }
    static const char text[] = "\0\xff\0The quick brown fox.\n%\nA second fortune.\n";
    fuzz_seed(text, sizeof(text) - 1);
}
#endif
