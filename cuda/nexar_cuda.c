/* libnexar-cuda (include/nexar/nexar_cuda.h): a nexar_device_adapter over
 * the CUDA runtime, loaded with dlopen. cuda_runtime_api.h is used for its
 * types only; nothing here links CUDA.
 *
 * Synchronous copies take a staging slot (pinned buffer, its own stream)
 * from a pool, blocking while all are busy, and move the bytes through it
 * in slot-sized pieces; host memory from host_alloc is copied directly.
 * Asynchronous copies take a slot only when one is free and the copy fits
 * (D2H: the bytes reach the caller's buffer when event_query first sees the
 * event done); otherwise they copy directly on a shared stream per
 * direction, which for pageable memory CUDA completes (D2H) or stages (H2D)
 * before cudaMemcpyAsync returns: correct, only less asynchronous. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nexar/nexar_cuda.h"

#define NC_SLOTS 4
#define NC_SLOT_BYTES ((size_t)4 << 20)

typedef struct nc_api {
  cudaError_t (*SetDevice)(int);
  cudaError_t (*GetDeviceCount)(int *);
  cudaError_t (*StreamCreateWithPriority)(cudaStream_t *, unsigned, int);
  cudaError_t (*DeviceGetStreamPriorityRange)(int *, int *);
  cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
  cudaError_t (*StreamSynchronize)(cudaStream_t);
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t *, unsigned);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);
  cudaError_t (*EventDestroy)(cudaEvent_t);
  cudaError_t (*HostAlloc)(void **, size_t, unsigned);
  cudaError_t (*FreeHost)(void *);
  const char *(*GetErrorString)(cudaError_t);
  cudaError_t (*StreamDestroy)(cudaStream_t); /* optional */
} nc_api;

typedef struct nc_slot {
  char *buf;
  cudaStream_t st;
  int busy;
} nc_slot;

typedef struct nc_pin {
  char *p;
  size_t n;
} nc_pin;

typedef struct nc {
  nexar_device_adapter pub; /* first: the adapter is the context */
  nc_api api;
  void *dl;
  int dev;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  nc_slot *slot;
  unsigned nslot;
  size_t slotb;
  cudaStream_t ast[2]; /* direct asynchronous copies: [0] D2H, [1] H2D */
  int nast;
  nc_pin *pin; /* host_alloc's buffers (copied without a bounce) */
  size_t npin, cappin;
} nc;

typedef struct nc_ev {
  cudaEvent_t ev;
  nc_slot *s;     /* held until done (NULL: direct) */
  void *host_dst; /* D2H through a slot: copied here once done */
  size_t len;
  int done;
} nc_ev;

static _Thread_local char nc_err[512];

const char *nexar_cuda_last_error(void) {
  return nc_err;
}

__attribute__((format(printf, 2, 3))) static int fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(nc_err, sizeof nc_err, fmt, ap);
  va_end(ap);
  return rc;
}

static const char *cerr(const nc *c, cudaError_t e) {
  const char *s = c->api.GetErrorString ? c->api.GetErrorString(e) : NULL;
  return s ? s : "unknown CUDA error";
}

/* ------------------------------------------------------------ loading */

static int env_size(const char *name, size_t def, size_t lo, size_t hi, size_t *out) {
  const char *v = getenv(name);
  *out = def;
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end || x < lo || x > hi)
    return fail(NEXAR_ERR_INVALID_ARGUMENT, "%s=%s: want an integer in [%zu, %zu]", name, v, lo,
                hi);
  *out = (size_t)x;
  return 0;
}

static int load(nc *c) {
  static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                      "libcudart.so.11"};
  const char *forced = getenv("NEXAR_CUDA_LIBRARY");
  char last[256] = "";
  if (forced && *forced) {
    c->dl = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    if (!c->dl)
      return fail(NEXAR_ERR_UNSUPPORTED, "libcudart not found: NEXAR_CUDA_LIBRARY=%s: %s", forced,
                  dlerror());
  } else {
    for (size_t i = 0; !c->dl && i < sizeof names / sizeof *names; i++) {
      c->dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
      if (!c->dl) snprintf(last, sizeof last, "%s", dlerror());
    }
    if (!c->dl)
      return fail(NEXAR_ERR_UNSUPPORTED,
                  "libcudart not found: tried libcudart.so, .so.13, .so.12, .so.11 (last: %s); "
                  "install the CUDA runtime or set NEXAR_CUDA_LIBRARY",
                  last);
  }
  struct {
    const char *name;
    void **slot;
    int optional;
  } syms[] = {
      {"cudaSetDevice", (void **)&c->api.SetDevice, 0},
      {"cudaGetDeviceCount", (void **)&c->api.GetDeviceCount, 0},
      {"cudaStreamCreateWithPriority", (void **)&c->api.StreamCreateWithPriority, 0},
      {"cudaDeviceGetStreamPriorityRange", (void **)&c->api.DeviceGetStreamPriorityRange, 0},
      {"cudaMemcpyAsync", (void **)&c->api.MemcpyAsync, 0},
      {"cudaStreamSynchronize", (void **)&c->api.StreamSynchronize, 0},
      {"cudaEventCreateWithFlags", (void **)&c->api.EventCreateWithFlags, 0},
      {"cudaEventRecord", (void **)&c->api.EventRecord, 0},
      {"cudaEventQuery", (void **)&c->api.EventQuery, 0},
      {"cudaEventDestroy", (void **)&c->api.EventDestroy, 0},
      {"cudaHostAlloc", (void **)&c->api.HostAlloc, 0},
      {"cudaFreeHost", (void **)&c->api.FreeHost, 0},
      {"cudaGetErrorString", (void **)&c->api.GetErrorString, 0},
      {"cudaStreamDestroy", (void **)&c->api.StreamDestroy, 1},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    *syms[i].slot = dlsym(c->dl, syms[i].name);
    if (!*syms[i].slot && !syms[i].optional) {
      dlclose(c->dl); /* no CUDA call made yet: safe to unload */
      c->dl = NULL;
      return fail(NEXAR_ERR_UNSUPPORTED, "libcudart not usable: it lacks %s", syms[i].name);
    }
  }
  return 0;
}

/* ------------------------------------------------------------- slots */

static nc_slot *slot_get(nc *c, int wait) {
  pthread_mutex_lock(&c->mu);
  for (;;) {
    for (unsigned i = 0; i < c->nslot; i++)
      if (!c->slot[i].busy) {
        c->slot[i].busy = 1;
        pthread_mutex_unlock(&c->mu);
        return &c->slot[i];
      }
    if (!wait) break;
    pthread_cond_wait(&c->cv, &c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void slot_put(nc *c, nc_slot *s) {
  pthread_mutex_lock(&c->mu);
  s->busy = 0;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int pinned(nc *c, const void *p, size_t n) {
  const char *q = p;
  int yes = 0;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; !yes && i < c->npin; i++)
    yes = q >= c->pin[i].p && n <= c->pin[i].n && q - c->pin[i].p <= (ptrdiff_t)(c->pin[i].n - n);
  pthread_mutex_unlock(&c->mu);
  return yes;
}

/* ------------------------------------------------- synchronous copies */

static int sync_copy(nc *c, int to_dev, void *dst, const void *src, size_t len) {
  cudaError_t e = c->api.SetDevice(c->dev);
  if (e != cudaSuccess) return fail(NEXAR_ERR_IO, "cudaSetDevice(%d): %s", c->dev, cerr(c, e));
  if (!len) return 0;
  nc_slot *s = slot_get(c, 1);
  int direct = pinned(c, to_dev ? src : dst, len);
  enum cudaMemcpyKind k = to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  int rc = 0;
  for (size_t off = 0; !rc && off < len;) {
    size_t n = direct ? len : (len - off < c->slotb ? len - off : c->slotb);
    char *d = (char *)dst + off;
    const char *sr = (const char *)src + off;
    if (direct)
      e = c->api.MemcpyAsync(d, sr, n, k, s->st);
    else if (to_dev) {
      memcpy(s->buf, sr, n);
      e = c->api.MemcpyAsync(d, s->buf, n, k, s->st);
    } else {
      e = c->api.MemcpyAsync(s->buf, sr, n, k, s->st);
    }
    if (e == cudaSuccess) e = c->api.StreamSynchronize(s->st);
    if (e != cudaSuccess)
      rc = fail(NEXAR_ERR_IO, "cuda %s copy of %zu bytes: %s", to_dev ? "H2D" : "D2H", n,
                cerr(c, e));
    else if (!direct && !to_dev)
      memcpy(d, s->buf, n);
    off += n;
  }
  slot_put(c, s);
  return rc;
}

static int to_host(void *ctx, void *host_dst, const void *dev_src, size_t len) {
  return sync_copy(ctx, 0, host_dst, dev_src, len);
}
static int from_host(void *ctx, void *dev_dst, const void *host_src, size_t len) {
  return sync_copy(ctx, 1, dev_dst, host_src, len);
}

/* ------------------------------------------------ asynchronous copies */

static int async_copy(nc *c, int to_dev, void *dst, const void *src, size_t len, void **out) {
  *out = NULL;
  cudaError_t e = c->api.SetDevice(c->dev);
  if (e != cudaSuccess) return fail(NEXAR_ERR_IO, "cudaSetDevice(%d): %s", c->dev, cerr(c, e));
  nc_ev *v = calloc(1, sizeof *v);
  if (!v) return fail(NEXAR_ERR_NOMEM, "cuda event");
  e = c->api.EventCreateWithFlags(&v->ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    free(v);
    return fail(NEXAR_ERR_IO, "cudaEventCreateWithFlags: %s", cerr(c, e));
  }
  enum cudaMemcpyKind k = to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  const void *host = to_dev ? src : dst;
  cudaStream_t st = c->ast[to_dev];
  if (len && len <= c->slotb && !pinned(c, host, len)) v->s = slot_get(c, 0);
  if (v->s) {
    st = v->s->st;
    if (to_dev) {
      memcpy(v->s->buf, src, len);
      e = c->api.MemcpyAsync(dst, v->s->buf, len, k, st);
    } else {
      v->host_dst = dst;
      v->len = len;
      e = c->api.MemcpyAsync(v->s->buf, src, len, k, st);
    }
  } else if (len) {
    e = c->api.MemcpyAsync(dst, src, len, k, st);
  }
  if (e == cudaSuccess) e = c->api.EventRecord(v->ev, st);
  if (e != cudaSuccess) {
    if (v->s) {
      c->api.StreamSynchronize(st);
      slot_put(c, v->s);
    }
    c->api.EventDestroy(v->ev);
    free(v);
    return fail(NEXAR_ERR_IO, "cuda async %s copy of %zu bytes: %s", to_dev ? "H2D" : "D2H", len,
                cerr(c, e));
  }
  *out = v;
  return 0;
}

static int to_host_async(void *ctx, void *host_dst, const void *dev_src, size_t len, void **ev) {
  return async_copy(ctx, 0, host_dst, dev_src, len, ev);
}
static int from_host_async(void *ctx, void *dev_dst, const void *host_src, size_t len, void **ev) {
  return async_copy(ctx, 1, dev_dst, host_src, len, ev);
}

static int event_query(void *ctx, void *p) {
  nc *c = ctx;
  nc_ev *v = p;
  if (v->done) return 1;
  cudaError_t e = c->api.EventQuery(v->ev);
  if (e == cudaErrorNotReady) return 0;
  if (e != cudaSuccess) {
    fail(NEXAR_ERR_IO, "cudaEventQuery: %s", cerr(c, e));
    return -1;
  }
  if (v->s) {
    if (v->host_dst) memcpy(v->host_dst, v->s->buf, v->len);
    slot_put(c, v->s);
    v->s = NULL;
  }
  v->done = 1;
  return 1;
}

static void event_release(void *ctx, void *p) {
  nc *c = ctx;
  nc_ev *v = p;
  if (!v) return;
  if (v->s) { /* released before done (a failure, an abort): the slot is
               * reused only once its copy is over */
    c->api.SetDevice(c->dev);
    c->api.StreamSynchronize(v->s->st);
    slot_put(c, v->s);
  }
  c->api.EventDestroy(v->ev);
  free(v);
}

/* ------------------------------------------------------ pinned memory */

static void *host_alloc(void *ctx, size_t len) {
  nc *c = ctx;
  void *p = NULL;
  if (c->api.SetDevice(c->dev) != cudaSuccess) return NULL;
  if (c->api.HostAlloc(&p, len ? len : 1, cudaHostAllocPortable) != cudaSuccess) return NULL;
  pthread_mutex_lock(&c->mu);
  if (c->npin == c->cappin) {
    size_t cap = c->cappin ? c->cappin * 2 : 16;
    nc_pin *np = realloc(c->pin, cap * sizeof *np);
    if (!np) {
      pthread_mutex_unlock(&c->mu);
      c->api.FreeHost(p);
      return NULL;
    }
    c->pin = np;
    c->cappin = cap;
  }
  c->pin[c->npin++] = (nc_pin){p, len};
  pthread_mutex_unlock(&c->mu);
  return p;
}

static void host_free(void *ctx, void *p) {
  nc *c = ctx;
  if (!p) return;
  pthread_mutex_lock(&c->mu);
  for (size_t i = 0; i < c->npin; i++)
    if (c->pin[i].p == p) {
      c->pin[i] = c->pin[--c->npin];
      break;
    }
  pthread_mutex_unlock(&c->mu);
  c->api.FreeHost(p);
}

/* ---------------------------------------------------------- lifecycle */

void nexar_cuda_adapter_del(nexar_device_adapter *a) {
  nc *c = (nc *)a;
  if (!c) return;
  if (c->api.SetDevice) c->api.SetDevice(c->dev);
  for (unsigned i = 0; c->slot && i < c->nslot; i++) {
    if (c->slot[i].st) {
      c->api.StreamSynchronize(c->slot[i].st);
      if (c->api.StreamDestroy) c->api.StreamDestroy(c->slot[i].st);
    }
    if (c->slot[i].buf) c->api.FreeHost(c->slot[i].buf);
  }
  for (int i = 0; i < c->nast; i++) {
    c->api.StreamSynchronize(c->ast[i]);
    if (c->api.StreamDestroy) c->api.StreamDestroy(c->ast[i]);
  }
  free(c->slot);
  free(c->pin);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  /* c->dl stays loaded: the CUDA runtime must not be unloaded once used */
  free(c);
}

int nexar_cuda_adapter_device(const nexar_device_adapter *a) {
  return a ? ((const nc *)a)->dev : -1;
}

static int setup(nc *c) {
  int n = 0;
  cudaError_t e = c->api.GetDeviceCount(&n);
  if (e != cudaSuccess) return fail(NEXAR_ERR_UNSUPPORTED, "no CUDA device: %s", cerr(c, e));
  if (n <= 0) return fail(NEXAR_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount is 0");
  if (c->dev < 0 || c->dev >= n)
    return fail(NEXAR_ERR_INVALID_ARGUMENT, "CUDA device %d: this machine has devices 0..%d",
                c->dev, n - 1);
  if ((e = c->api.SetDevice(c->dev)) != cudaSuccess)
    return fail(NEXAR_ERR_IO, "cudaSetDevice(%d): %s", c->dev, cerr(c, e));
  int lo = 0, hi = 0; /* numerically lowest = greatest priority */
  if ((e = c->api.DeviceGetStreamPriorityRange(&lo, &hi)) != cudaSuccess)
    return fail(NEXAR_ERR_IO, "cudaDeviceGetStreamPriorityRange: %s", cerr(c, e));
  c->slot = calloc(c->nslot, sizeof *c->slot);
  if (!c->slot) return fail(NEXAR_ERR_NOMEM, "cuda adapter slots");
  for (unsigned i = 0; i < c->nslot; i++) {
    if ((e = c->api.StreamCreateWithPriority(&c->slot[i].st, cudaStreamNonBlocking, hi)) !=
        cudaSuccess)
      return fail(NEXAR_ERR_IO, "cudaStreamCreateWithPriority: %s", cerr(c, e));
    if ((e = c->api.HostAlloc((void **)&c->slot[i].buf, c->slotb, cudaHostAllocPortable)) !=
        cudaSuccess)
      return fail(NEXAR_ERR_IO, "cudaHostAlloc(%zu): %s", c->slotb, cerr(c, e));
  }
  for (; c->nast < 2; c->nast++)
    if ((e = c->api.StreamCreateWithPriority(&c->ast[c->nast], cudaStreamNonBlocking, hi)) !=
        cudaSuccess)
      return fail(NEXAR_ERR_IO, "cudaStreamCreateWithPriority: %s", cerr(c, e));
  return 0;
}

int nexar_cuda_adapter_new(nexar_device_adapter **out, int device) {
  nc_err[0] = 0;
  if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_cuda_adapter_new: out is NULL");
  *out = NULL;
  size_t ns, sb;
  int rc = env_size("NEXAR_CUDA_SLOTS", NC_SLOTS, 1, 64, &ns);
  if (!rc) rc = env_size("NEXAR_CUDA_SLOT_BYTES", NC_SLOT_BYTES, 4096, (size_t)1 << 30, &sb);
  if (rc) return rc;
  nc *c = calloc(1, sizeof *c);
  if (!c) return fail(NEXAR_ERR_NOMEM, "cuda adapter");
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->dev = device;
  c->nslot = (unsigned)ns;
  c->slotb = sb;
  if ((rc = load(c)) != 0 || (rc = setup(c)) != 0) {
    char why[sizeof nc_err];
    snprintf(why, sizeof why, "%s", nc_err);
    if (!c->dl) c->api.SetDevice = NULL; /* nothing loaded: no CUDA calls in del */
    nexar_cuda_adapter_del(&c->pub);
    snprintf(nc_err, sizeof nc_err, "%s", why);
    return rc;
  }
  nexar_device_adapter *a = &c->pub;
  a->struct_size = sizeof *a;
  a->ctx = c;
  a->to_host = to_host;
  a->from_host = from_host;
  a->to_host_async = to_host_async;
  a->from_host_async = from_host_async;
  a->event_query = event_query;
  a->event_release = event_release;
  a->host_alloc = host_alloc;
  a->host_free = host_free;
  a->reduce = NULL;
  *out = a;
  return 0;
}
