/* A process-wide pool of worker threads for work that may block: RPC
 * handlers, failure callbacks, non-blocking collectives. It grows when every
 * worker is busy (a blocked handler never starves another) and idle workers
 * exit after a while, so nothing lingers after the last communicator. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/common.h"
#include "core/cpubind.h"

#define NX_POOL_MAX 256
#define NX_POOL_IDLE_NS 2000000000ull

typedef struct job {
  struct job *next;
  void (*fn)(void *);
  void *arg;
} job;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static job *pool_head, *pool_tail;
static int pool_threads, pool_idle;

static void *worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pool_mu);
  for (;;) {
    while (!pool_head) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += NX_POOL_IDLE_NS / 1000000000ull;
      pool_idle++;
      int rc = pthread_cond_timedwait(&pool_cv, &pool_mu, &ts);
      pool_idle--;
      if (rc == ETIMEDOUT && !pool_head) {
        pool_threads--;
        pthread_mutex_unlock(&pool_mu);
        return NULL;
      }
    }
    job *j = pool_head;
    pool_head = j->next;
    if (!pool_head) pool_tail = NULL;
    pthread_mutex_unlock(&pool_mu);
    j->fn(j->arg);
    free(j);
    pthread_mutex_lock(&pool_mu);
  }
}

int nx_pool_submit(void (*fn)(void *arg), void *arg) {
  job *j = malloc(sizeof *j);
  if (!j) return nx_fail(NEXAR_ERR_NOMEM, "worker job");
  j->fn = fn, j->arg = arg, j->next = NULL;
  pthread_mutex_lock(&pool_mu);
  if (pool_tail)
    pool_tail->next = j;
  else
    pool_head = j;
  pool_tail = j;
  int queued = 0;
  for (job *x = pool_head; x; x = x->next)
    queued++;
  if (pool_idle < queued && pool_threads < NX_POOL_MAX) {
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (nx_thread_create(&t, &at, worker, NULL) == 0) pool_threads++;
    pthread_attr_destroy(&at);
  }
  pthread_cond_signal(&pool_cv);
  pthread_mutex_unlock(&pool_mu);
  return 0;
}
