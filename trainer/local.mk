# trainer/local.mk — the GPT trainer (tempo-train) and its tests. It uses only include/tempo.h and
# links libtempo.la; the model kernels use OpenMP where configure found it.
#
# Sections: model (model.c, optim.c), data (data.c), the trainer program. Each adds to the
# variables below.

TRAINER_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)

# ---- model: GPT-2 forward/backward, AdamW, schedule (trainer/model.[ch], trainer/optim.[ch])

# ---- data: tokenizer, token shards, loader (trainer/data.[ch])

# ---- tempo-train
