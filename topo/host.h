/*
 * host.h — the identity of the host a rank runs on. Ranks with equal host ids share memory (shm
 * transport, shared-memory collectives); all others talk over tcp.
 */
#ifndef TEMPO_TOPO_HOST_H
#define TEMPO_TOPO_HOST_H

#include <stddef.h>
#include <stdint.h>

/** The host id: a hash of override (with "%r" replaced by rank) when override is non-empty;
 *  otherwise a hash of the host name, the kernel boot id and this process's network and mount
 *  namespaces, so that ranks in different network namespaces of one machine count as different
 *  hosts (they are how tests emulate a cluster). */
uint64_t tempo__host_id(const char *override, int rank);

/** The identity of the physical machine (or VM): host name and kernel boot id, ignoring namespaces
 *  and TEMPO_HOST_ID. Ranks with equal machine ids share CPUs, whatever transport they use. */
uint64_t tempo__machine_id(void);

/** Online CPUs of this host (at least 1). */
int tempo__host_ncpus(void);

/** Size in bytes of the last-level cache seen by CPU 0: sysfs (what the kernel of this machine or
 *  VM reports), else sysconf, else 32 MiB. */
size_t tempo__host_llc_bytes(void);

#endif /* TEMPO_TOPO_HOST_H */
