# tests/fault/local.mk — fault and error tests through the public API: ranks killed with SIGKILL,
# ranks that leave or abort, timeouts, invalid arguments, broken rendezvous.
#
# Each program is its own small launcher (tests/fault/job.h): it forks the ranks with TEMPO_RANK,
# TEMPO_SIZE and TEMPO_ROOT set, so that it can kill one of them by pid while the others go on, and
# prints TAP. Only loopback addresses are used.

TEMPO_FAULT_TESTS = \
	%reldir%/fault_kill \
	%reldir%/fault_leave \
	%reldir%/fault_timeout \
	%reldir%/fault_invalid \
	%reldir%/fault_bootstrap \
	%reldir%/fault_split \
	%reldir%/fault_mismatch

check_PROGRAMS += $(TEMPO_FAULT_TESTS)
TESTS += $(TEMPO_FAULT_TESTS)
noinst_HEADERS += %reldir%/job.h

%canon_reldir%_fault_kill_SOURCES = %reldir%/fault_kill.c
%canon_reldir%_fault_kill_LDADD = libtempo.la
%canon_reldir%_fault_leave_SOURCES = %reldir%/fault_leave.c
%canon_reldir%_fault_leave_LDADD = libtempo.la
%canon_reldir%_fault_timeout_SOURCES = %reldir%/fault_timeout.c
%canon_reldir%_fault_timeout_LDADD = libtempo.la
%canon_reldir%_fault_invalid_SOURCES = %reldir%/fault_invalid.c
%canon_reldir%_fault_invalid_LDADD = libtempo.la
%canon_reldir%_fault_bootstrap_SOURCES = %reldir%/fault_bootstrap.c
%canon_reldir%_fault_bootstrap_LDADD = libtempo.la
%canon_reldir%_fault_split_SOURCES = %reldir%/fault_split.c
%canon_reldir%_fault_split_LDADD = libtempo.la
%canon_reldir%_fault_mismatch_SOURCES = %reldir%/fault_mismatch.c
%canon_reldir%_fault_mismatch_LDADD = libtempo.la

# A rank killed while 20 scheduled requests are in flight (tests/fault/fault_sched.c).
check_PROGRAMS += %reldir%/fault_sched
TESTS += %reldir%/fault_sched
%canon_reldir%_fault_sched_SOURCES = %reldir%/fault_sched.c
%canon_reldir%_fault_sched_LDADD = libtempo.la

# Communicator context ids: 40,000 split-and-destroy rounds, and no message of a destroyed
# communicator reaches the successor that got its id (tests/fault/comm_ids.c).
check_PROGRAMS += %reldir%/comm_ids
TESTS += %reldir%/comm_ids
%canon_reldir%_comm_ids_SOURCES = %reldir%/comm_ids.c
%canon_reldir%_comm_ids_LDADD = libtempo.la

# Blame: a stopped rank, a stopped coordinator and a reset connection are named correctly by every
# survivor (tests/fault/fault_blame.c).
check_PROGRAMS += %reldir%/fault_blame
TESTS += %reldir%/fault_blame
%canon_reldir%_fault_blame_SOURCES = %reldir%/fault_blame.c
%canon_reldir%_fault_blame_LDADD = libtempo.la

# A rank stopped (SIGSTOP) during a broadcast loop: the others' memory stays bounded
# (TEMPO_UNEXPECTED_BYTES) and they time out naming a rank (tests/fault/fault_flood.c).
check_PROGRAMS += %reldir%/fault_flood
TESTS += %reldir%/fault_flood
%canon_reldir%_fault_flood_SOURCES = %reldir%/fault_flood.c
%canon_reldir%_fault_flood_LDADD = libtempo.la

# The flight recorder: a rank stuck outside tempo, a count that differs, a dump on SIGUSR1 and at
# the end; each rank's file and what `tempo-trace flight` says of them (tests/fault/fault_flight.c).
check_PROGRAMS += %reldir%/fault_flight
TESTS += %reldir%/fault_flight
%canon_reldir%_fault_flight_SOURCES = %reldir%/fault_flight.c
%canon_reldir%_fault_flight_LDADD = libtempo.la
