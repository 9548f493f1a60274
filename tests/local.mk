# tests/local.mk
include tests/mr/local.mk
