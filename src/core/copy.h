/* Copies into memory its writer will not read again soon. Pure (no system
 * calls); the only code here that knows the CPU's stores. */
#ifndef NX_CORE_COPY_H
#define NX_CORE_COPY_H

#include <stddef.h>

/* Copies len bytes from src to dst (they must not overlap) with stores
 * that go around the caches where the CPU has them (x86-64: SSE2
 * non-temporal stores, the bytes before dst's first 16-byte boundary and
 * after the last whole 64 bytes by memcpy), memcpy elsewhere. A plain store
 * first reads the line it writes (read for ownership): where the
 * destination is far larger than the caches, that read is a third of the
 * memory traffic of a copy, and the lines it brings in evict what the
 * copy reads next. The stores are fenced before it returns, so a release
 * store after it publishes them like memcpy's. */
void nx_copy_nt(void *dst, const void *src, size_t len);

#endif
