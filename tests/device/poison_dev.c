/* The poisoned device (poison_dev.h). */
#include "poison_dev.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static char *pd_base;
static size_t pd_size;
static atomic_size_t pd_top;
static pthread_mutex_t pd_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong pd_ncalls, pd_fail_at;
static unsigned pd_sleep_us;
static const pd_backend *pd_be;

void pd_use(const pd_backend *b) {
  pd_be = b;
}

void pd_init(size_t reserve) {
  if (pd_be) return;
  pd_base = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pd_base == MAP_FAILED) {
    perror("pd_init mmap");
    exit(2);
  }
  pd_size = reserve;
}

void *pd_alloc(size_t bytes) {
  if (pd_be) return pd_be->alloc(bytes);
  size_t n = (bytes + 4095) / 4096 * 4096 + 4096; /* a guard page after each */
  size_t at = atomic_fetch_add(&pd_top, n);
  if (at + n > pd_size) {
    fprintf(stderr, "poisoned device: out of memory\n");
    exit(2);
  }
  return pd_base + at;
}

void pd_free(void *p, size_t bytes) {
  if (pd_be) {
    pd_be->free(p);
    return;
  }
  if (bytes) madvise(p, (bytes + 4095) / 4096 * 4096, MADV_DONTNEED);
}

static void in_dev(const void *p, size_t n) {
  const char *q = p;
  if (n && (q < pd_base || q + n > pd_base + pd_size)) {
    fprintf(stderr, "poisoned device: %p (+%zu) is not device memory\n", p, n);
    abort();
  }
}

static void copy(void *dst, const void *src, size_t n, const void *dev) {
  in_dev(dev, n);
  if (!n) return;
  uintptr_t a = (uintptr_t)dev & ~(uintptr_t)4095,
            e = ((uintptr_t)dev + n + 4095) & ~(uintptr_t)4095;
  pthread_mutex_lock(&pd_mu);
  mprotect((void *)a, e - a, PROT_READ | PROT_WRITE);
  memcpy(dst, src, n);
  mprotect((void *)a, e - a, PROT_NONE);
  pthread_mutex_unlock(&pd_mu);
}

void pd_put(void *dev, const void *host, size_t n) {
  if (pd_be) {
    pd_be->put(dev, host, n);
    return;
  }
  copy(dev, host, n, dev);
}
void pd_get(void *host, const void *dev, size_t n) {
  if (pd_be) {
    pd_be->get(host, dev, n);
    return;
  }
  copy(host, dev, n, dev);
}

static int failing(void) {
  unsigned long c = atomic_fetch_add(&pd_ncalls, 1) + 1;
  unsigned long f = atomic_load(&pd_fail_at);
  return f && c >= f;
}

static void nap(void) {
  if (!pd_sleep_us) return;
  struct timespec ts = {0, (long)pd_sleep_us * 1000};
  nanosleep(&ts, NULL);
}

static int to_host(void *ctx, void *h, const void *d, size_t n) {
  (void)ctx;
  if (failing()) return -5;
  nap();
  copy(h, d, n, d);
  return 0;
}
static int from_host(void *ctx, void *d, const void *h, size_t n) {
  (void)ctx;
  if (failing()) return -5;
  nap();
  copy(d, h, n, d);
  return 0;
}

/* async: the copy is done at issue time, the event completes after sleep_us */
typedef struct ev {
  struct timespec due;
} ev;
static int mk_ev(void **out) {
  ev *e = malloc(sizeof *e);
  if (!e) return -12;
  clock_gettime(CLOCK_MONOTONIC, &e->due);
  e->due.tv_nsec += (long)pd_sleep_us * 1000;
  while (e->due.tv_nsec >= 1000000000L)
    e->due.tv_sec++, e->due.tv_nsec -= 1000000000L;
  *out = e;
  return 0;
}
static int to_host_a(void *ctx, void *h, const void *d, size_t n, void **out) {
  (void)ctx;
  if (failing()) return -5;
  copy(h, d, n, d);
  return mk_ev(out);
}
static int from_host_a(void *ctx, void *d, const void *h, size_t n, void **out) {
  (void)ctx;
  if (failing()) return -5;
  copy(d, h, n, d);
  return mk_ev(out);
}
static int query(void *ctx, void *p) {
  (void)ctx;
  ev *e = p;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > e->due.tv_sec ||
         (now.tv_sec == e->due.tv_sec && now.tv_nsec >= e->due.tv_nsec);
}
static void release(void *ctx, void *p) {
  (void)ctx;
  free(p);
}
static void *halloc(void *ctx, size_t n) {
  (void)ctx;
  return malloc(n);
}
static void hfree(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

void pd_adapter(nexar_device_adapter *a, int async, unsigned sleep_us) {
  if (pd_be) {
    pd_be->adapter(a, async);
    return;
  }
  memset(a, 0, sizeof *a);
  pd_sleep_us = sleep_us;
  a->struct_size = async ? sizeof *a : offsetof(nexar_device_adapter, to_host_async);
  a->to_host = to_host;
  a->from_host = from_host;
  if (async) {
    a->to_host_async = to_host_a;
    a->from_host_async = from_host_a;
    a->event_query = query;
    a->event_release = release;
    a->host_alloc = halloc;
    a->host_free = hfree;
  }
}

unsigned long pd_calls(void) {
  return atomic_load(&pd_ncalls);
}
void pd_fail_after(unsigned long n) {
  atomic_store(&pd_fail_at, n ? atomic_load(&pd_ncalls) + n : 0);
}
