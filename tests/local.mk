# tests/local.mk
include tests/mr/local.mk

# The TAP producer shared by compiled tests.
noinst_HEADERS += %reldir%/tap.h
