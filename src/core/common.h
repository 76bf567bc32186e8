/* Internal helpers shared by every module: error detail, logging, time,
 * randomness, checked allocation. Internal names use the nx_ prefix. */
#ifndef NX_CORE_COMMON_H
#define NX_CORE_COMMON_H

#include <nexar/nexar.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NX_UNUSED(x) ((void)(x))
#define NX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define NX_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Records the thread-local error sentence and returns err, so a failure site
 * reads `return nx_fail(NEXAR_ERR_TIMEOUT, "recv from rank %u: ...", r);`. */
int nx_fail(int err, const char *fmt, ...) NX_PRINTF(2, 3);
/* Stores the sentence without a code (used when forwarding a stored message). */
void nx_set_error_text(const char *text);

/* Logging: silent unless NEXAR_DEBUG=error|warn|info|debug|trace. */
enum { NX_LOG_OFF = 0, NX_LOG_ERROR, NX_LOG_WARN, NX_LOG_INFO, NX_LOG_DEBUG, NX_LOG_TRACE };
extern int nx_log_level;
void nx_log_init(void);
/* Expands a NEXAR_DEBUG_FILE template into out[cap]: %h host, %p pid, %r rank
 * (NULL host or rank: "x"), %% a '%'; anything else is copied. Length-safe: a
 * result that does not fit in cap bytes (with its terminator) is refused, not
 * cut: -1 and out = "". 0 on success. Pure (no I/O); for tests. */
int nx_log_expand(const char *tmpl, const char *rank, const char *host, long pid, char *out,
                  size_t cap);
void nx_log_set_rank(uint32_t rank);
void nx_log_write(int level, const char *fmt, ...) NX_PRINTF(2, 3);
#define NX_LOG(lvl, ...)                                                                           \
  do {                                                                                             \
    if (nx_log_level >= (lvl)) nx_log_write((lvl), __VA_ARGS__);                                   \
  } while (0)
#define NX_ERROR(...) NX_LOG(NX_LOG_ERROR, __VA_ARGS__)
#define NX_WARN(...) NX_LOG(NX_LOG_WARN, __VA_ARGS__)
#define NX_INFO(...) NX_LOG(NX_LOG_INFO, __VA_ARGS__)
#define NX_DEBUG(...) NX_LOG(NX_LOG_DEBUG, __VA_ARGS__)
#define NX_TRACE(...) NX_LOG(NX_LOG_TRACE, __VA_ARGS__)

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
uint64_t nx_now_ns(void);
/* The same clock at the kernel tick's resolution (a few ms), for a fraction
 * of the cost: what diagnostics stamp on every operation. Never ahead of
 * nx_now_ns. */
uint64_t nx_coarse_ns(void);
/* Fills buf from the OS CSPRNG (getrandom); 0 or NEXAR_ERR_IO. */
int nx_random(void *buf, size_t len);
/* Constant-time comparison: 1 if equal. */
int nx_ct_equal(const void *a, const void *b, size_t len);

/* Allocation that never returns NULL silently: callers check and map to NOMEM. */
void *nx_calloc(size_t n, size_t size);
char *nx_strdup(const char *s);
/* realloc for tables whose growth failure must surface as NEXAR_ERR_NOMEM
 * (the receive order, the QUIC connection-id table); tests set
 * nx_realloc_fail_at = n to make the n-th call from now fail. */
void *nx_realloc(void *p, size_t n);
extern int nx_realloc_fail_at;

/* Splits "host:port", "[v6]:port" into host and port; 0 or INVALID_ARGUMENT.
 * nx_addr_split (core/addr.h) with the field named in its error sentence. */
int nx_split_hostport(const char *addr, char *host, size_t hostcap, uint16_t *port);

/* CPU hints for code that polls memory another process writes (the
 * shared-memory rings and segment): a pause between looks, and a line
 * fetched for writing ahead of the stores. */
static inline void nx_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
/* The cache line at p, fetched for writing: one transfer from the core
 * that last wrote it instead of a read and then an upgrade. prefetchw (a
 * NOP on x86 CPUs without it; GCC emits it only with -mprfchw). */
static inline void nx_prefetch_write(const void *p) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

#endif
