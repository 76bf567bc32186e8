/* Request completion and waiting: spin briefly, then sleep on a condvar.
 * A wake-up from sleep costs tens of microseconds here, so small messages
 * are caught by the spin. */
#include "runtime/request.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


nexar_request *nx_req_new(void) {
  nexar_request *r = nx_calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_store(&r->progress_ns, nx_now_ns());
  return r;
}

void nx_req_complete(nexar_request *r, int rc, const char *errtext) {
  pthread_mutex_lock(&r->mu);
  if (!atomic_load(&r->done)) {
    r->rc = rc;
    if (rc && errtext) r->errtext = strdup(errtext);
    atomic_store_explicit(&r->done, 1, memory_order_release);
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
}

void nx_req_free(nexar_request *r) {
  if (!r) return;
  if (r->on_free) r->on_free(r);
  free(r->errtext);
  free(r->iov_copy);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

/* Gives up on a request that made no progress: detaches it from the engine
 * under ep->mu so no buffer of it is touched afterwards. */
static void req_timeout(nexar_request *r) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: no progress for %u ms", r->what[0] ? r->what : "operation",
           r->timeout_ms);
  if (r->ep) {
    pthread_mutex_lock(&r->ep->mu);
    if (!atomic_load(&r->done)) {
      if (r->kind == NX_REQ_SEND && r->tx) {
        /* completes once ngtcp2 no longer references the buffer */
        snprintf(r->what, sizeof r->what, "%s", msg);
        nx_tx_cancel_locked(r->ep, r->tx, NEXAR_ERR_TIMEOUT);
        r->timeout_ms = 0;
      } else {
        if (r->kind == NX_REQ_RECV) nx_match_cancel(r->ep, &r->recv);
        nx_req_complete(r, NEXAR_ERR_TIMEOUT, msg);
      }
    }
    pthread_mutex_unlock(&r->ep->mu);
  } else {
    nx_req_complete(r, NEXAR_ERR_TIMEOUT, msg);
  }
}

int nx_req_wait(nexar_request *r) {
  for (int i = 0; i < 2000 && !atomic_load_explicit(&r->done, memory_order_acquire); i++) {
    if (i > 200) sched_yield();
    else __builtin_ia32_pause();
  }
  while (!atomic_load_explicit(&r->done, memory_order_acquire)) {
    uint64_t now = nx_now_ns();
    uint64_t wake = now + 50000000ull; /* re-check deadlines every 50 ms */
    if (r->timeout_ms) {
      uint64_t dl = atomic_load(&r->progress_ns) + (uint64_t)r->timeout_ms * 1000000ull;
      if (now >= dl) {
        req_timeout(r);
        continue;
      }
      if (dl < wake) wake = dl;
    }
    struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->done)) pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    pthread_mutex_unlock(&r->mu);
  }
  if (r->rc) nx_set_error_text(r->errtext ? r->errtext : nexar_strerror(r->rc));
  return r->rc;
}

int nexar_wait(nexar_request *req) {
  if (!req) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "wait: NULL request");
  int rc = nx_req_wait(req);
  nx_req_free(req);
  return rc;
}

int nexar_test(nexar_request *req, int *done) {
  if (!req || !done) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "test: NULL argument");
  *done = atomic_load_explicit(&req->done, memory_order_acquire);
  if (!*done && req->timeout_ms &&
      nx_now_ns() >= atomic_load(&req->progress_ns) + (uint64_t)req->timeout_ms * 1000000ull) {
    req_timeout(req);
    *done = 1;
  }
  return 0;
}

int nexar_wait_all(nexar_request **reqs, size_t n) {
  if (!reqs && n) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "wait_all: NULL array");
  int first = 0;
  char msg[512] = "";
  for (size_t i = 0; i < n; i++) {
    if (!reqs[i]) continue;
    int rc = nx_req_wait(reqs[i]);
    if (rc && !first) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", nexar_last_error());
    }
    nx_req_free(reqs[i]);
    reqs[i] = NULL;
  }
  if (first) nx_set_error_text(msg);
  return first;
}
