/*
 * devmem.h — `-M cuda` (perf/devmem.c): CUDA device buffers for the benchmarks, through the CUDA
 * driver loaded at run time. Copies take any direction (unified addressing); 0 is success.
 */
#ifndef TEMPO_PERF_DEVMEM_H
#define TEMPO_PERF_DEVMEM_H

#include <stddef.h>

int perf_dev_init(char *why, size_t len);
int perf_dev_index(void);
void *perf_dev_alloc(size_t n);
void perf_dev_free(void *p);
int perf_dev_copy(void *dst, const void *src, size_t n);

#endif
