/*
 * fuzz_qspec.c — compressor specs (quant/quant.c's tempo__qspec_parse: TEMPO_COMPRESS, the
 * bucketers' and tempo-train's --compress), text from the user or the environment.
 *
 * Input: the spec's text (up to the first NUL). What must hold: no crash or overrun; a spec that
 * parses formats (tempo__qspec_format) into its canonical text, which parses into the same
 * parameters and formats into the same text again.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "quant/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = malloc(size + 1);
    memcpy(spec, data, size);
    spec[size] = '\0';
    tempo__qparams_t p, q;
    if (tempo__qspec_parse(spec, &p) == TEMPO_OK) {
        char canon[1024], again[1024];
        tempo__qspec_format(&p, canon, sizeof(canon));
        if (tempo__qspec_parse(canon, &q) != TEMPO_OK) {
            fprintf(stderr, "'%s' parses, its canonical '%s' does not: %s\n", spec, canon,
                    tempo__errmsg());
            abort();
        }
        tempo__qspec_format(&q, again, sizeof(again));
        if (strcmp(canon, again) != 0) {
            fprintf(stderr, "'%s': '%s' then '%s'\n", spec, canon, again);
            abort();
        }
    }
    free(spec);
    return 0;
}

#ifdef FUZZ_SEEDS
static void fuzz_seeds(void)
{
    static const char *const s[] = {
        "alq:bits=3,bucket=512", "qsgd:bits=4,bucket=8192,entropy=rans", "nuqsgd:mul=0.5,zero=1",
        "terngrad:clip=1", "amq-n:bits=2,refit=1,10,100,norm=linf", "topk:ratio=0.01,ef=1",
        "randk:ratio=0.25,seed=7", "powersgd:rank=4", "fp16", "none", "alq:dist=8,min_bytes=64K"};
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
        fuzz_seed(s[i], strlen(s[i]));
    }
}
#endif
