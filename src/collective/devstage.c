/* Device staging of a collective schedule (nexar_device_adapter).
 *
 * The algorithm builds its schedule on the caller's buffers exactly as for
 * host memory (same algorithm choice, messages and reduction order, so the
 * result is bit-identical). Then, with an adapter, every device region of
 * the job (the buffers the API call names) gets a host shadow: an anonymous
 * MAP_NORESERVE mapping of the region's length, of which only the segments
 * in use are resident. Segment k of a region is bytes [k*S, (k+1)*S) (S =
 * NEXAR_DEVICE_SEGMENT_BYTES): a pure function of offset and length. The
 * schedule's pointers into device regions are rewritten to the shadow, so
 * the executor, the port, the same-host rendezvous (whose peer reads our
 * shadow with process_vm_readv), TCP bulk and the relays only ever see host
 * memory.
 *
 * From the schedule (data) each segment's touches are known: whether it
 * must be copied out (some step reads it, or writes only part of it) or is
 * only ever overwritten whole (an output: never copied out); the number of
 * touches tells when it
 * is no longer needed; a write makes it dirty. Segments are copied out in
 * first-use order up to NEXAR_DEVICE_PREFETCH ahead of their use, while the
 * earlier ones are on the wire; a step is held (sched gate) until its
 * segments are loaded; after the last touch a dirty segment is copied back
 * and every segment's pages are returned (MADV_DONTNEED). Copies of a
 * synchronous adapter run on the copy threads (runtime/devcopy.c), which
 * kick the run when done; an asynchronous adapter's events are polled by
 * the run, from whichever thread drives the engine. The run ends only when
 * no copy is outstanding; after a failure no copy is started, outstanding
 * ones are waited for (bounded: an event pending for 10 s more leaks its
 * shadow rather than freeing memory a device may still write).
 *
 * Single-threaded like the schedule (one thread advances a run), except
 * the copy threads, which touch only a segment's state and the counters. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "collective/coll.h"
#include "runtime/comm.h"
#include "runtime/devcopy.h"

#define NX_DSTAGE_LEAK_NS 10000000000ull

enum { SEG_IDLE, SEG_LOADING, SEG_LOADED, SEG_FLUSHING, SEG_GONE };
enum { T_R = 1, T_W = 2 };

typedef struct dreg {
  char *dev; /* device address (never dereferenced) */
  size_t len;
  char *sh; /* shadow */
  size_t maplen;
  uint32_t seg0;
} dreg;

typedef struct dseg {
  uint32_t reg;
  size_t off, len;
  uint32_t uses;
  uint32_t first; /* step index of the first touch */
  uint8_t seen, need_load, dirty, ahead, used;
  atomic_int state;
  void *ev;
  nx_dstage *d;
} dseg;

typedef struct dtouch {
  uint32_t lo, hi; /* segments */
  uint8_t mode;
} dtouch;

struct nx_dstage {
  const nexar_device_adapter *ad;
  int async;
  size_t segb;
  unsigned prefetch, threads;
  const char *name;
  dreg *reg;
  uint32_t nreg;
  dseg *seg;
  uint32_t nseg;
  uint32_t *toff; /* touches of step i: touch[toff[i] .. toff[i+1]) */
  dtouch *touch;
  uint64_t *order; /* segments to copy out: first use << 32 | segment */
  uint32_t norder, cursor;
  unsigned ahead;
  atomic_int inflight;
  atomic_int rc;
  int stopped;
  uint64_t stop_ns;
  nx_dstage_cbs cb;
  char why[256]; /* the first failure */
};

/* ------------------------------------------------------- the regions */

static size_t vext(const size_t *counts, const size_t *displs, uint32_t n) {
  size_t m = 0;
  for (uint32_t i = 0; i < n; i++)
    if (counts[i] && displs[i] + counts[i] > m) m = displs[i] + counts[i];
  return m;
}

static int add_reg(dreg *r, uint32_t *n, uint32_t cap, const void *p, size_t bytes) {
  if (!p || !bytes) return 0;
  if (*n == cap) return NEXAR_ERR_NOMEM;
  r[*n].dev = (char *)p;
  r[*n].len = bytes;
  (*n)++;
  return 0;
}

static int by_addr(const void *a, const void *b) {
  const dreg *x = a, *y = b;
  return x->dev < y->dev ? -1 : x->dev > y->dev;
}

/* The device buffers the call names, merged where they overlap. */
static int regions(const nx_job *j, dreg *r, uint32_t *n, uint32_t cap) {
  size_t es = j->es, c = j->count, w = j->world;
  int rc = 0;
  *n = 0;
  switch (j->kind) {
  case NX_COLL_ALL_REDUCE:
  case NX_COLL_ALL_REDUCE_RS_AG:
  case NX_COLL_BROADCAST:
  case NX_COLL_REDUCE:
  case NX_COLL_SCAN:
  case NX_COLL_EXSCAN:
    rc = add_reg(r, n, cap, j->buf, c * es);
    break;
  case NX_COLL_ALL_REDUCE_BUCKETED:
    for (size_t i = 0; !rc && i < j->nbuckets; i++)
      rc = add_reg(r, n, cap, j->buckets[i].buf, j->buckets[i].count * es);
    break;
  case NX_COLL_ALL_GATHER:
  case NX_COLL_GATHER:
    rc = add_reg(r, n, cap, j->send, c * es);
    if (!rc) rc = add_reg(r, n, cap, j->recv, c * w * es);
    break;
  case NX_COLL_REDUCE_SCATTER:
  case NX_COLL_SCATTER:
    rc = add_reg(r, n, cap, j->send, c * w * es);
    if (!rc) rc = add_reg(r, n, cap, j->recv, c * es);
    break;
  case NX_COLL_ALL_TO_ALL:
    rc = add_reg(r, n, cap, j->send, c * w * es);
    if (!rc) rc = add_reg(r, n, cap, j->recv, c * w * es);
    break;
  case NX_COLL_ALL_GATHER_V:
  case NX_COLL_GATHER_V:
    rc = add_reg(r, n, cap, j->send, c * es);
    if (!rc && j->rcounts)
      rc = add_reg(r, n, cap, j->recv, vext(j->rcounts, j->rdispls, j->world) * es);
    break;
  case NX_COLL_REDUCE_SCATTER_V: {
    size_t tot = 0;
    for (uint32_t i = 0; j->rcounts && i < j->world; i++)
      tot += j->rcounts[i];
    rc = add_reg(r, n, cap, j->send, tot * es);
    if (!rc && j->rcounts) rc = add_reg(r, n, cap, j->recv, j->rcounts[j->rank] * es);
    break;
  }
  case NX_COLL_ALL_TO_ALL_V:
    if (j->scounts) rc = add_reg(r, n, cap, j->send, vext(j->scounts, j->sdispls, j->world) * es);
    if (!rc && j->rcounts)
      rc = add_reg(r, n, cap, j->recv, vext(j->rcounts, j->rdispls, j->world) * es);
    break;
  case NX_COLL_SCATTER_V:
    if (j->scounts) rc = add_reg(r, n, cap, j->send, vext(j->scounts, j->sdispls, j->world) * es);
    if (!rc) rc = add_reg(r, n, cap, j->recv, c * es);
    break;
  default: /* barrier, split: no data buffers */
    break;
  }
  if (rc) return rc;
  qsort(r, *n, sizeof *r, by_addr);
  uint32_t m = 0;
  for (uint32_t i = 0; i < *n; i++) {
    if (m && r[i].dev < r[m - 1].dev + r[m - 1].len) {
      char *end = r[i].dev + r[i].len;
      if (end > r[m - 1].dev + r[m - 1].len) r[m - 1].len = (size_t)(end - r[m - 1].dev);
    } else {
      r[m++] = r[i];
    }
  }
  *n = m;
  return 0;
}

/* The region holding [p, p + len), or -1 (host memory). */
static int find_reg(const nx_dstage *d, const void *p, size_t len, uint32_t *out) {
  const char *q = p;
  uint32_t lo = 0, hi = d->nreg;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (q < d->reg[mid].dev)
      hi = mid;
    else if (q >= d->reg[mid].dev + d->reg[mid].len)
      lo = mid + 1;
    else {
      if (len > (size_t)(d->reg[mid].dev + d->reg[mid].len - q)) return -2;
      *out = mid;
      return 0;
    }
  }
  return -1;
}

/* The device operands of a step: pointer slot, bytes, mode. */
static int operands(const nx_step *st, size_t es, void ***slot, size_t *len, uint8_t *mode) {
  int n = 0;
  size_t el = st->len * es;
  switch (st->kind) {
  case NX_ST_SEND:
    slot[n] = &((nx_step *)st)->dst, len[n] = st->len, mode[n++] = T_R;
    break;
  case NX_ST_RECV:
    slot[n] = &((nx_step *)st)->dst, len[n] = st->len, mode[n++] = T_W;
    break;
  case NX_ST_REDUCE3:
    slot[n] = &((nx_step *)st)->dst, len[n] = el, mode[n++] = T_W;
    slot[n] = (void **)&((nx_step *)st)->a, len[n] = el, mode[n++] = T_R;
    slot[n] = (void **)&((nx_step *)st)->b, len[n] = el, mode[n++] = T_R;
    break;
  case NX_ST_REDUCE:
    slot[n] = &((nx_step *)st)->dst, len[n] = el, mode[n++] = T_R | T_W;
    slot[n] = (void **)&((nx_step *)st)->a, len[n] = el, mode[n++] = T_R;
    break;
  case NX_ST_COPY:
    slot[n] = &((nx_step *)st)->dst, len[n] = st->len, mode[n++] = T_W;
    slot[n] = (void **)&((nx_step *)st)->a, len[n] = st->len, mode[n++] = T_R;
    break;
  case NX_ST_FILL:
    slot[n] = &((nx_step *)st)->dst, len[n] = el, mode[n++] = T_W;
    break;
  case NX_ST_AVG:
    slot[n] = &((nx_step *)st)->dst, len[n] = el, mode[n++] = T_R | T_W;
    break;
  default:
    break;
  }
  return n;
}

void nx_dstage_free(nx_dstage *d) {
  if (!d) return;
  for (uint32_t i = 0; i < d->nreg; i++)
    if (d->reg[i].sh) munmap(d->reg[i].sh, d->reg[i].maplen);
  free(d->reg);
  free(d->seg);
  free(d->toff);
  free(d->touch);
  free(d->order);
  free(d);
}

static int by_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int nx_dstage_new(nx_job *j, const nx_dstage_cbs *cb, nx_dstage **out) {
  *out = NULL;
  const nexar_device_adapter *ad = j->ad;
  const char *name = nx_job_name(j);
  if (!ad) return 0;
  uint32_t cap = (uint32_t)(j->kind == NX_COLL_ALL_REDUCE_BUCKETED ? j->nbuckets : 2);
  nx_dstage *d = calloc(1, sizeof *d);
  dreg *r = calloc(cap ? cap : 1, sizeof *r);
  if (!d || !r) {
    free(d), free(r);
    return nx_fail(NEXAR_ERR_NOMEM, "%s: device staging", name);
  }
  d->reg = r;
  d->ad = ad;
  d->async = nx_dev_async(ad);
  d->cb = *cb;
  d->name = name;
  const nx_knobs *k = &j->c->ep->knobs;
  d->segb = k->device_segment_bytes;
  d->prefetch = k->device_prefetch;
  d->threads = k->device_copy_threads;
  atomic_init(&d->inflight, 0);
  atomic_init(&d->rc, 0);
  int rc = regions(j, r, &d->nreg, cap);
  if (rc || d->nreg == 0) {
    nx_dstage_free(d);
    return rc ? nx_fail(rc, "%s: device staging", name) : 0;
  }
  uint64_t nseg = 0;
  for (uint32_t i = 0; i < d->nreg; i++) {
    r[i].seg0 = (uint32_t)nseg;
    nseg += (r[i].len + d->segb - 1) / d->segb;
  }
  if (nseg > UINT32_MAX / 2) {
    nx_dstage_free(d);
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: too many device segments", name);
  }
  nx_sched *s = &j->sched;
  d->nseg = (uint32_t)nseg;
  d->seg = calloc(nseg, sizeof *d->seg);
  d->toff = calloc((size_t)s->n + 1, sizeof *d->toff);
  d->touch = malloc(((size_t)s->n * 3 + 1) * sizeof *d->touch);
  d->order = malloc((nseg + 1) * sizeof *d->order);
  if (!d->seg || !d->toff || !d->touch || !d->order) {
    nx_dstage_free(d);
    return nx_fail(NEXAR_ERR_NOMEM, "%s: device staging", name);
  }
  for (uint32_t i = 0; i < d->nreg; i++) {
    size_t pg = 4096, ml = (r[i].len + pg - 1) / pg * pg;
    void *m =
        mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      nx_dstage_free(d);
      return nx_fail(NEXAR_ERR_NOMEM, "%s: no address space for a %zu-byte device shadow", name,
                     r[i].len);
    }
    r[i].sh = m;
    r[i].maplen = ml;
    uint32_t ns = (uint32_t)((r[i].len + d->segb - 1) / d->segb);
    for (uint32_t q = 0; q < ns; q++) {
      dseg *g = &d->seg[r[i].seg0 + q];
      g->reg = i;
      g->off = (size_t)q * d->segb;
      g->len = r[i].len - g->off < d->segb ? r[i].len - g->off : d->segb;
      g->d = d;
      atomic_init(&g->state, SEG_IDLE);
    }
  }
  /* touches, in program order */
  uint32_t nt = 0;
  for (uint32_t i = 0; i < s->n; i++) {
    nx_step *st = &s->st[i];
    d->toff[i] = nt;
    void **slot[3];
    size_t len[3];
    uint8_t mode[3];
    int no = operands(st, j->es, slot, len, mode);
    for (int o = 0; o < no; o++) {
      uint32_t ri;
      int f = len[o] ? find_reg(d, *slot[o], len[o], &ri) : -1;
      if (f == -1) continue;
      if (f == -2) {
        nx_dstage_free(d);
        return nx_fail(NEXAR_ERR_PROTOCOL, "%s: a step crosses a device buffer's end", name);
      }
      size_t off = (size_t)((char *)*slot[o] - r[ri].dev);
      *slot[o] = r[ri].sh + off;
      dtouch *t = &d->touch[nt++];
      t->lo = r[ri].seg0 + (uint32_t)(off / d->segb);
      t->hi = r[ri].seg0 + (uint32_t)((off + len[o] - 1) / d->segb);
      t->mode = mode[o];
      for (uint32_t q = t->lo; q <= t->hi; q++) {
        dseg *g = &d->seg[q];
        g->uses++;
        if (!g->seen) {
          g->seen = 1;
          g->first = i;
        }
        /* A receive may be posted (in program order) before a send that
         * reads the same bytes, ordered only through the network: so a
         * segment is left un-copied only when every touch overwrites it
         * whole and none reads it (an output-only buffer). */
        size_t a = off > g->off ? off : g->off;
        size_t e = off + len[o] < g->off + g->len ? off + len[o] : g->off + g->len;
        if ((mode[o] & T_R) || a != g->off || e != g->off + g->len) g->need_load = 1;
      }
    }
  }
  d->toff[s->n] = nt;
  for (uint32_t q = 0; q < d->nseg; q++)
    if (d->seg[q].need_load) d->order[d->norder++] = (uint64_t)d->seg[q].first << 32 | q;
  qsort(d->order, d->norder, sizeof *d->order, by_u64);
  *out = d;
  return 0;
}

/* ------------------------------------------------------------ copies */

/* The first failure wins; the thread's error text (nx_fail's) is kept. */
static void set_rc(nx_dstage *d, int rc) {
  int z = 0;
  if (atomic_compare_exchange_strong(&d->rc, &z, rc))
    snprintf(d->why, sizeof d->why, "%s", nexar_last_error());
}

const char *nx_dstage_why(const nx_dstage *d) {
  return d->why;
}

static void release_pages(nx_dstage *d, dseg *g) {
  madvise(d->reg[g->reg].sh + g->off, (g->len + 4095) / 4096 * 4096, MADV_DONTNEED);
}

/* A copy thread's task: one segment, one direction. */
static void copy_task(void *arg) {
  dseg *g = arg;
  nx_dstage *d = g->d;
  dreg *r = &d->reg[g->reg];
  int flush = atomic_load(&g->state) == SEG_FLUSHING;
  void *ev = NULL;
  int rc = flush ? nx_dev_issue(d->ad, 1, r->dev + g->off, r->sh + g->off, g->len, &ev, d->name)
                 : nx_dev_issue(d->ad, 0, r->sh + g->off, r->dev + g->off, g->len, &ev, d->name);
  if (rc) set_rc(d, rc);
  if (flush) release_pages(d, g);
  atomic_store(&g->state, flush ? SEG_GONE : SEG_LOADED);
  nx_dstage_cbs cb = d->cb; /* d may be freed once inflight drops; the run
                             * lives on by the reference cb.drop gives up */
  atomic_fetch_sub(&d->inflight, 1);
  cb.wake(cb.arg); /* after the count: the run ends when it sees 0 */
  cb.drop(cb.arg);
}

static void start_copy(nx_dstage *d, dseg *g, int flush) {
  atomic_store(&g->state, flush ? SEG_FLUSHING : SEG_LOADING);
  dreg *r = &d->reg[g->reg];
  if (d->async) {
    int rc = flush
                 ? nx_dev_issue(d->ad, 1, r->dev + g->off, r->sh + g->off, g->len, &g->ev, d->name)
                 : nx_dev_issue(d->ad, 0, r->sh + g->off, r->dev + g->off, g->len, &g->ev, d->name);
    if (rc) {
      set_rc(d, rc);
      atomic_store(&g->state, flush ? SEG_GONE : SEG_LOADED);
      return;
    }
    atomic_fetch_add(&d->inflight, 1);
    return;
  }
  atomic_fetch_add(&d->inflight, 1);
  d->cb.hold(d->cb.arg);
  if (nx_dev_submit(d->threads, copy_task, g)) {
    set_rc(d, NEXAR_ERR_NOMEM);
    atomic_store(&g->state, flush ? SEG_GONE : SEG_LOADED);
    atomic_fetch_sub(&d->inflight, 1);
    d->cb.drop(d->cb.arg);
  }
}

static void prefetch(nx_dstage *d) {
  while (!d->stopped && d->ahead < d->prefetch && d->cursor < d->norder) {
    dseg *g = &d->seg[(uint32_t)d->order[d->cursor++]];
    if (atomic_load(&g->state) != SEG_IDLE) continue;
    g->ahead = 1;
    d->ahead++;
    start_copy(d, g, 0);
  }
}

int nx_dstage_poll(nx_dstage *d, int stop, uint64_t now, int *loaded) {
  int nl = 0;
  if (stop && !d->stopped) {
    d->stopped = 1;
    d->stop_ns = now;
  }
  if (d->async)
    for (uint32_t q = 0; q < d->nseg; q++) {
      dseg *g = &d->seg[q];
      int st = atomic_load(&g->state);
      if (!g->ev || (st != SEG_LOADING && st != SEG_FLUSHING)) continue;
      int rc = nx_dev_query(d->ad, g->ev, d->name);
      if (rc == 0) continue;
      g->ev = NULL;
      if (rc < 0) set_rc(d, rc);
      if (st == SEG_FLUSHING)
        release_pages(d, g);
      else
        nl++;
      atomic_store(&g->state, st == SEG_FLUSHING ? SEG_GONE : SEG_LOADED);
      atomic_fetch_sub(&d->inflight, 1);
    }
  prefetch(d);
  if (loaded) *loaded = nl;
  return atomic_load(&d->inflight);
}

int nx_dstage_rc(nx_dstage *d) {
  return atomic_load(&d->rc);
}

int nx_dstage_stuck(const nx_dstage *d, uint64_t now) {
  /* only events can be abandoned: a copy thread holds the run */
  return d->async && d->stopped && now - d->stop_ns > NX_DSTAGE_LEAK_NS;
}

int nx_dstage_async(const nx_dstage *d) {
  return d->async;
}

/* ------------------------------------------------- the executor's hooks */

int nx_dstage_gate(nx_dstage *d, const nx_sched *s, nx_step *st) {
  int rc = atomic_load(&d->rc);
  if (rc) {
    nx_fail(rc, "%s", d->why);
    return rc;
  }
  uint32_t i = (uint32_t)(st - s->st), ready = 1;
  for (uint32_t t = d->toff[i]; t < d->toff[i + 1]; t++)
    for (uint32_t q = d->touch[t].lo; q <= d->touch[t].hi; q++) {
      dseg *g = &d->seg[q];
      if (!g->used) {
        g->used = 1;
        if (g->ahead) d->ahead--;
      }
      int state = atomic_load(&g->state);
      if (state == SEG_IDLE) {
        if (g->need_load)
          start_copy(d, g, 0);
        else
          atomic_store(&g->state, SEG_LOADED); /* overwritten whole before any read */
        state = atomic_load(&g->state);
      }
      if (state != SEG_LOADED) ready = 0;
    }
  prefetch(d);
  if ((rc = atomic_load(&d->rc)) != 0) {
    nx_fail(rc, "%s", d->why);
    return rc;
  }
  return (int)ready;
}

void nx_dstage_finish(nx_dstage *d, const nx_sched *s, const nx_step *st) {
  uint32_t i = (uint32_t)(st - s->st);
  for (uint32_t t = d->toff[i]; t < d->toff[i + 1]; t++)
    for (uint32_t q = d->touch[t].lo; q <= d->touch[t].hi; q++) {
      dseg *g = &d->seg[q];
      if (d->touch[t].mode & T_W) g->dirty = 1;
      if (--g->uses) continue;
      if (g->dirty && !d->stopped && !atomic_load(&d->rc)) {
        start_copy(d, g, 1);
      } else {
        release_pages(d, g);
        atomic_store(&g->state, SEG_GONE);
      }
    }
}
