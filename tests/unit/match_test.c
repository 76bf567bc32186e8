/* Matching queues without sockets: posted and unexpected queues, order per
 * (source, tag), size mismatch leaving the message queued, probe, keys
 * separated by communicator, kind, round and segment, and cancellation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"

#include "check.h"

static nx_ep *fake_ep(void) {
  nx_ep *ep = calloc(1, sizeof *ep);
  pthread_mutex_init(&ep->mu, NULL);
  pthread_cond_init(&ep->cv, NULL);
  CHECK(nx_ep_peers_alloc(ep, 1) == 0, "peer table");
  ep->peers[0]->state = NX_PEER_UP;
  return ep;
}

/* A complete message from "src" delivered as the engine would (self path). */
static void deliver(nx_ep *ep, uint64_t comm, uint8_t kind, uint64_t tag, uint32_t round,
                    const void *data, size_t len) {
  nx_frame f = {.kind = kind, .comm_id = comm, .tag = tag, .round = round};
  nexar_iovec v = {(void *)data, len};
  f.length = len;
  CHECK(nx_local_deliver(ep, &f, &v, 1) == 0, "deliver");
}

static nx_recv *post(nx_ep *ep, uint64_t comm, uint8_t kind, uint64_t tag, uint32_t round,
                     void *buf, size_t len, int *rc) {
  nx_recv *r = calloc(1, sizeof *r);
  r->key = (nx_key){.comm = comm, .kind = kind, .src = 0, .tag = tag, .round = round};
  r->iov1 = (nexar_iovec){buf, len};
  r->iov = &r->iov1;
  r->niov = 1;
  r->len = len;
  *rc = nx_match_post(ep, r);
  return r;
}

int main(void) {
  nx_ep *ep = fake_ep();
  int rc;
  char buf[32];
  /* unexpected first: order kept per tag, other tags independent */
  deliver(ep, 0, NX_KIND_P2P, 5, 0, "first", 6);
  deliver(ep, 0, NX_KIND_P2P, 6, 0, "other", 6);
  deliver(ep, 0, NX_KIND_P2P, 5, 0, "second", 7);
  nx_key k = {.comm = 0, .kind = NX_KIND_P2P, .src = 0, .tag = 5};
  nx_msg *m = nx_match_peek(ep, &k, 0);
  CHECK(m && m->f.length == 6, "probe sees the first message");
  /* wrong length: refused, message kept */
  nx_recv *r = post(ep, 0, NX_KIND_P2P, 5, 0, buf, 7, &rc);
  CHECK(rc == NEXAR_ERR_SIZE_MISMATCH && !r->done, "size mismatch");
  free(r);
  r = post(ep, 0, NX_KIND_P2P, 5, 0, buf, 6, &rc);
  CHECK(rc == 0 && r->done && r->rc == 0 && !strcmp(buf, "first"), "first in order");
  free(r);
  r = post(ep, 0, NX_KIND_P2P, 5, 0, buf, 7, &rc);
  CHECK(rc == 0 && r->done && !strcmp(buf, "second"), "second in order");
  free(r);
  r = post(ep, 0, NX_KIND_P2P, 6, 0, buf, 6, &rc);
  CHECK(rc == 0 && r->done && !strcmp(buf, "other"), "other tag");
  free(r);
  /* posted first: two receives for one key match in posting order */
  char a[8] = "", b[8] = "";
  nx_recv *ra = post(ep, 0, NX_KIND_P2P, 9, 0, a, 2, &rc);
  nx_recv *rb = post(ep, 0, NX_KIND_P2P, 9, 0, b, 2, &rc);
  CHECK(!ra->done && !rb->done, "posted");
  deliver(ep, 0, NX_KIND_P2P, 9, 0, "A", 2);
  deliver(ep, 0, NX_KIND_P2P, 9, 0, "B", 2);
  CHECK(ra->done && rb->done && !strcmp(a, "A") && !strcmp(b, "B"), "posting order");
  free(ra), free(rb);
  /* communicator, kind and round separate keys */
  deliver(ep, 7, NX_KIND_P2P, 1, 0, "c7", 3);
  deliver(ep, 0, NX_KIND_P2P, 1, 0, "c0", 3);
  r = post(ep, 0, NX_KIND_P2P, 1, 0, buf, 3, &rc);
  CHECK(r->done && !strcmp(buf, "c0"), "comm separation");
  free(r);
  r = post(ep, 7, NX_KIND_P2P, 1, 0, buf, 3, &rc);
  CHECK(r->done && !strcmp(buf, "c7"), "comm 7");
  free(r);
  /* a posted receive can be cancelled and then never completes */
  r = post(ep, 0, NX_KIND_P2P, 42, 0, buf, 1, &rc);
  CHECK(nx_match_cancel(ep, r) == 1, "cancel");
  deliver(ep, 0, NX_KIND_P2P, 42, 0, "z", 1);
  CHECK(!r->done, "cancelled receive untouched");
  CHECK(nx_match_peek(ep, &(nx_key){.kind = NX_KIND_P2P, .tag = 42}, 0) != NULL, "queued");
  free(r);
  /* a zero-length message */
  deliver(ep, 0, NX_KIND_P2P, 3, 0, NULL, 0);
  r = post(ep, 0, NX_KIND_P2P, 3, 0, NULL, 0, &rc);
  CHECK(rc == 0 && r->done, "zero length");
  free(r);
  /* probe any source */
  CHECK(nx_match_peek(ep, &(nx_key){.kind = NX_KIND_P2P, .tag = 42, .src = 99}, 1), "any src");
  /* a same-host descriptor whose sender's cancel came first (it overtook
   * the descriptor on another stream) and that then arrives whole: dropped
   * on arrival, never queued for a receive that will not come (its sender
   * would wait for the answer forever: CI, integration.shm.world9) */
  {
    uint8_t desc[32] = {0};
    desc[0] = 77; /* the rendezvous id, little-endian */
    ep->peers[0]->rndv_cancelled[ep->peers[0]->ncancelled++ % 8] = 77;
    nx_frame f = {.kind = NX_KIND_COLL, .tag = 116, .round = 1, .flags = NX_FLAG_RNDV};
    f.status = sizeof desc; /* a descriptor's own length */
    nexar_iovec v = {desc, sizeof desc};
    ep->stop = 1; /* the answer to the sender is not sent over a fake endpoint */
    CHECK(nx_local_deliver(ep, &f, &v, 1) == 0, "deliver descriptor");
    ep->stop = 0;
    CHECK(!nx_match_peek(ep, &(nx_key){.kind = NX_KIND_COLL, .tag = 116, .round = 1}, 0),
          "a cancelled descriptor that arrives whole is dropped");
    CHECK(ep->peers[0]->rndv_cancelled[0] == 0, "its cancel is used up");
  }
  /* cleanup */
  while (ep->unexp_head) {
    nx_msg *x = ep->unexp_head;
    ep->unexp_head = x->next;
    nx_msg_free(ep, x);
  }
  CHECK(ep->unexp_bytes == 0, "unexpected bytes accounted (%llu)",
        (unsigned long long)ep->unexp_bytes);
  nx_ep_peers_free(ep);
  free(ep);
  printf("match_test: all passed\n");
  return 0;
}
