/* A member's seed channel after formation (see seedlink.h). */
#include "cluster/seedlink.h"

#include <stdlib.h>
#include <string.h>

#include "core/common.h"

nx_seedlink *nx_seedlink_new(nx_chan *ch) {
  nx_seedlink *l = nx_calloc(1, sizeof *l);
  if (!l) {
    nx_chan_del(ch);
    return NULL;
  }
  pthread_mutex_init(&l->mu, NULL);
  l->ch = ch;
  return l;
}

void nx_seedlink_del(void *link) {
  nx_seedlink *l = link;
  if (!l) return;
  nx_chan_del(l->ch);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

static void gone_locked(nx_seedlink *l, const char *why) {
  NX_INFO("the seed channel closed (%s): no more admissions", why);
  nx_chan_del(l->ch);
  l->ch = NULL;
  l->waiting = 0;
}

/* Handles one message that is not an answer: a WAITING notice. */
static int notice_locked(nx_seedlink *l, const void *msg, size_t len) {
  if (nx_waiting_decode(msg, len) != 0) return NEXAR_ERR_PROTOCOL;
  l->waiting = 1;
  return 0;
}

int nx_seedlink_poll(nx_seedlink *l) {
  if (!l) return 0;
  pthread_mutex_lock(&l->mu);
  while (l->ch) {
    void *msg = NULL;
    size_t len = 0;
    int rc = nx_chan_recv(l->ch, &msg, &len, 0);
    if (rc == NEXAR_ERR_TIMEOUT) break;
    if (!rc) rc = notice_locked(l, msg, len);
    free(msg);
    if (rc) {
      char why[200];
      snprintf(why, sizeof why, "%s", nexar_last_error());
      gone_locked(l, why);
    }
  }
  int w = l->waiting;
  pthread_mutex_unlock(&l->mu);
  return w;
}

int nx_seedlink_admit(nx_seedlink *l, const nx_admit_req *q, nx_admit_list *out,
                      uint32_t timeout_ms) {
  memset(out, 0, sizeof *out);
  if (!l) return nx_fail(NEXAR_ERR_IO, "admission: no seed channel");
  pthread_mutex_lock(&l->mu);
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = l->ch ? nx_admit_req_encode(q, &buf, &len) : nx_fail(NEXAR_ERR_IO, "the seed is gone");
  if (!rc) rc = nx_chan_send(l->ch, buf, len, timeout_ms);
  free(buf);
  l->waiting = 0;
  uint64_t deadline = nx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  while (!rc) {
    uint64_t now = nx_now_ns();
    if (now >= deadline) {
      rc = nx_fail(NEXAR_ERR_TIMEOUT, "admission: the seed did not answer in %u ms", timeout_ms);
      break;
    }
    void *msg = NULL;
    rc = nx_chan_recv(l->ch, &msg, &len, (uint32_t)((deadline - now) / 1000000ull) + 1);
    if (rc) break;
    if (nx_bootmsg_type(msg, len) == NX_BOOT_ADMIT_LIST) {
      rc = nx_admit_list_decode(msg, len, out);
      free(msg);
      break;
    }
    rc = notice_locked(l, msg, len); /* joiners queued meanwhile: asked for at the next one */
    free(msg);
  }
  if (rc && l->ch) { /* a late answer would be read as a notice: give the channel up */
    char why[200];
    snprintf(why, sizeof why, "%s", nexar_last_error());
    gone_locked(l, why);
    rc = nx_fail(rc == NEXAR_ERR_PROTOCOL || rc == NEXAR_ERR_TIMEOUT ? rc : NEXAR_ERR_IO,
                 "admission: %s", why);
  }
  pthread_mutex_unlock(&l->mu);
  return rc;
}
