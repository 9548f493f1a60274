# tests/local.mk
include tests/mr/local.mk
include tests/unit/local.mk
include tests/fault/local.mk

# The TAP producer shared by compiled tests.
noinst_HEADERS += %reldir%/tap.h
