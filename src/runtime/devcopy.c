/* Device adapter calls and the copy threads (devcopy.h). */
#include "runtime/devcopy.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/common.h"
#include "core/cpubind.h"

#define NX_DEV_IDLE_NS 2000000000ull

static int has(const nexar_device_adapter *a, size_t end) {
  return a->struct_size >= end;
}
#define HAS(a, field) has((a), offsetof(nexar_device_adapter, field) + sizeof((a)->field))

int nx_dev_async(const nexar_device_adapter *a) {
  return a && HAS(a, event_release) && a->to_host_async && a->from_host_async && a->event_query &&
         a->event_release;
}

int nx_dev_issue(const nexar_device_adapter *a, int to_dev, void *dst, const void *src, size_t len,
                 void **ev, const char *what) {
  *ev = NULL;
  int rc;
  if (nx_dev_async(a))
    rc = to_dev ? a->from_host_async(a->ctx, dst, src, len, ev)
                : a->to_host_async(a->ctx, dst, src, len, ev);
  else
    rc = to_dev ? a->from_host(a->ctx, dst, src, len) : a->to_host(a->ctx, dst, src, len);
  if (rc) {
    *ev = NULL;
    return nx_fail(NEXAR_ERR_IO, "%s: the device adapter's %s of %zu bytes failed (%d)", what,
                   to_dev ? "copy to the device" : "copy to the host", len, rc);
  }
  return 0;
}

int nx_dev_query(const nexar_device_adapter *a, void *ev, const char *what) {
  if (!ev) return 1;
  int q = a->event_query(a->ctx, ev);
  if (q == 0) return 0;
  a->event_release(a->ctx, ev);
  if (q < 0) return nx_fail(NEXAR_ERR_IO, "%s: a device copy failed (event query %d)", what, q);
  return 1;
}

int nx_dev_copy(const nexar_device_adapter *a, int to_dev, void *dst, const void *src, size_t len,
                size_t seg, const char *what) {
  if (!seg) seg = len;
  for (size_t off = 0; off < len; off += seg) {
    size_t n = len - off < seg ? len - off : seg;
    void *ev = NULL;
    int rc = nx_dev_issue(a, to_dev, (char *)dst + off, (const char *)src + off, n, &ev, what);
    if (rc) return rc;
    while ((rc = nx_dev_query(a, ev, what)) == 0) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
    if (rc < 0) return rc;
  }
  return 0;
}

/* A pinned block remembers who allocated it (a header before the data). */
typedef struct {
  size_t pinned;
  size_t pad;
} nx_dev_hdr;

void *nx_dev_host_alloc(const nexar_device_adapter *a, size_t len) {
  size_t n = len + sizeof(nx_dev_hdr);
  nx_dev_hdr *h = NULL;
  if (a && HAS(a, host_free) && a->host_alloc && a->host_free) h = a->host_alloc(a->ctx, n);
  if (h)
    h->pinned = 1;
  else if ((h = malloc(n)) != NULL)
    h->pinned = 0;
  return h ? h + 1 : NULL;
}

void nx_dev_host_free(const nexar_device_adapter *a, void *p) {
  if (!p) return;
  nx_dev_hdr *h = (nx_dev_hdr *)p - 1;
  if (h->pinned)
    a->host_free(a->ctx, h);
  else
    free(h);
}

/* ------------------------------------------------------- copy threads */

typedef struct task {
  struct task *next;
  void (*fn)(void *);
  void *arg;
} task;

static pthread_mutex_t cp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cp_cv = PTHREAD_COND_INITIALIZER;
static task *cp_head, *cp_tail;
static unsigned cp_threads, cp_idle;

static void *copier(void *arg) {
  (void)arg;
  pthread_mutex_lock(&cp_mu);
  for (;;) {
    while (!cp_head) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += NX_DEV_IDLE_NS / 1000000000ull;
      cp_idle++;
      int rc = pthread_cond_timedwait(&cp_cv, &cp_mu, &ts);
      cp_idle--;
      if (rc == ETIMEDOUT && !cp_head) {
        cp_threads--;
        pthread_mutex_unlock(&cp_mu);
        return NULL;
      }
    }
    task *t = cp_head;
    cp_head = t->next;
    if (!cp_head) cp_tail = NULL;
    pthread_mutex_unlock(&cp_mu);
    t->fn(t->arg);
    free(t);
    pthread_mutex_lock(&cp_mu);
  }
}

int nx_dev_submit(unsigned threads, void (*fn)(void *arg), void *arg) {
  task *t = malloc(sizeof *t);
  if (!t) return nx_fail(NEXAR_ERR_NOMEM, "device copy task");
  t->fn = fn, t->arg = arg, t->next = NULL;
  pthread_mutex_lock(&cp_mu);
  if (cp_tail)
    cp_tail->next = t;
  else
    cp_head = t;
  cp_tail = t;
  if (!cp_idle && cp_threads < (threads ? threads : 1)) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (nx_thread_create(&th, &at, copier, NULL) == 0) cp_threads++;
    pthread_attr_destroy(&at);
  }
  int none = cp_threads == 0;
  if (!none) pthread_cond_signal(&cp_cv);
  pthread_mutex_unlock(&cp_mu);
  if (none) { /* no thread could start: copy here */
    pthread_mutex_lock(&cp_mu);
    task *x = cp_head;
    if (x == t) {
      cp_head = t->next;
      if (!cp_head) cp_tail = NULL;
    }
    pthread_mutex_unlock(&cp_mu);
    if (x == t) {
      fn(arg);
      free(t);
    }
  }
  return 0;
}
