/* RPC: requests are served on pool threads without the application polling;
 * replies are matched by request id; an unknown function id is answered
 * NEXAR_ERR_RPC_NO_HANDLER at once. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/request.h"

int nx_pool_submit(void (*fn)(void *arg), void *arg);

static nx_rpc_handler *find_handler(nx_comm *c, uint16_t fn_id) {
  for (size_t i = 0; i < c->nhandlers; i++)
    if (c->handlers[i].fn_id == fn_id) return &c->handlers[i];
  return NULL;
}

int nexar_rpc_register(nexar_client *c, uint16_t fn_id, nexar_rpc_fn fn, void *ctx) {
  int rc = nx_comm_check(c, "rpc_register");
  if (rc) return rc;
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  nx_rpc_handler *h = find_handler(c, fn_id);
  if (!fn) {
    if (h) *h = c->handlers[--c->nhandlers];
    /* once this returns, the old handler is not running */
    while (c->rpc_busy > 0)
      pthread_cond_wait(&c->rpc_idle, &ep->mu);
  } else if (h) {
    while (c->rpc_busy > 0)
      pthread_cond_wait(&c->rpc_idle, &ep->mu);
    h->fn = fn, h->ctx = ctx;
  } else {
    if (c->nhandlers == c->caphandlers) {
      size_t nc = c->caphandlers ? c->caphandlers * 2 : 8;
      nx_rpc_handler *a = realloc(c->handlers, nc * sizeof *a);
      if (!a) {
        pthread_mutex_unlock(&ep->mu);
        return nx_fail(NEXAR_ERR_NOMEM, "rpc_register");
      }
      c->handlers = a, c->caphandlers = nc;
    }
    c->handlers[c->nhandlers++] = (nx_rpc_handler){fn_id, fn, ctx};
  }
  pthread_mutex_unlock(&ep->mu);
  return 0;
}

static void reply_locked(nx_ep *ep, const nx_msg *req, int32_t status, const void *data,
                         size_t len) {
  nx_frame f = {0};
  f.kind = NX_KIND_RPC_RESP;
  f.comm_id = req->f.comm_id;
  f.tag = req->f.tag;
  f.round = req->f.round;
  f.status = status;
  nexar_iovec v = {(void *)data, len};
  if (nx_ep_send_locked(ep, req->f.src, &f, &v, len ? 1 : 0, NULL, NULL))
    NX_WARN("rpc reply to rank %u: %s", req->f.src, nexar_last_error());
}

typedef struct rpc_job {
  nx_ep *ep;
  nx_comm *c;
  nx_msg *m;
} rpc_job;

static void run_handler(void *arg) {
  rpc_job *j = arg;
  nx_ep *ep = j->ep;
  nx_comm *c = j->c;
  nx_msg *m = j->m;
  pthread_mutex_lock(&ep->mu);
  nx_rpc_handler *h = find_handler(c, (uint16_t)m->f.round);
  nexar_rpc_fn fn = h ? h->fn : NULL;
  void *ctx = h ? h->ctx : NULL;
  uint32_t caller = nx_comm_rank_of(c, m->f.src);
  pthread_mutex_unlock(&ep->mu);
  void *reply = NULL;
  size_t rlen = 0;
  int32_t status = NEXAR_ERR_RPC_NO_HANDLER;
  if (fn) {
    int hrc = fn(ctx, caller, m->buf, (size_t)m->got, &reply, &rlen);
    status = hrc ? NEXAR_ERR_RPC_FAILED : 0;
    if (hrc) {
      free(reply);
      reply = NULL;
      rlen = 0;
    }
  }
  pthread_mutex_lock(&ep->mu);
  reply_locked(ep, m, status, reply, reply ? rlen : 0);
  nx_msg_free(ep, m);
  c->rpc_busy--;
  pthread_cond_broadcast(&c->rpc_idle);
  pthread_mutex_unlock(&ep->mu);
  free(reply);
  nx_ep_unref(ep);
  free(j);
}

void nx_rpc_on_request_locked(nx_ep *ep, nx_msg *m) {
  nx_comm *c = nx_comm_find(ep, m->f.comm_id);
  if (c && !atomic_load(&c->aborted) && find_handler(c, (uint16_t)m->f.round)) {
    rpc_job *j = nx_calloc(1, sizeof *j);
    if (j) {
      j->ep = ep, j->c = c, j->m = m;
      c->rpc_busy++;
      nx_ep_ref(ep);
      if (nx_pool_submit(run_handler, j) == 0) return;
      c->rpc_busy--;
      atomic_fetch_sub(&ep->refs, 1);
      free(j);
    }
  }
  reply_locked(ep, m, NEXAR_ERR_RPC_NO_HANDLER, NULL, 0);
  nx_msg_free(ep, m);
}

int nexar_rpc(nexar_client *c, uint32_t target, uint16_t fn_id, const void *args, size_t args_len,
              void **reply, size_t *reply_len) {
  if (reply) *reply = NULL;
  if (reply_len) *reply_len = 0;
  int rc = nx_comm_check_peer(c, "rpc to", target);
  if (rc) return rc;
  if (!reply || !reply_len || (args_len && !args))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "rpc: NULL argument");
  if (target >= c->size)
    return nx_fail(NEXAR_ERR_INVALID_RANK, "rpc to rank %u: comm %llu has %u ranks", target,
                   (unsigned long long)c->id, c->size);
  nx_ep *ep = c->ep;
  nexar_request *r = nx_req_new();
  if (!r) return nx_fail(NEXAR_ERR_NOMEM, "rpc request");
  pthread_mutex_lock(&ep->mu);
  uint64_t id = c->next_rpc_id++;
  r->kind = NX_REQ_RECV;
  r->ep = ep;
  r->timeout_ms = c->cfg.rpc_timeout_ms;
  snprintf(r->what, sizeof r->what, "rpc fn %u to rank %u on comm %llu", fn_id, target,
           (unsigned long long)c->id);
  r->recv.req = r;
  r->recv.anylen = 1;
  r->recv.key =
      (nx_key){.comm = c->id, .kind = NX_KIND_RPC_RESP, .src = c->members[target], .tag = id};
  rc = nx_comm_check_peer_locked(c, "rpc to", target);
  if (!rc) rc = nx_match_post(ep, &r->recv);
  if (!rc &&
      (ep->peers[c->members[target]]->state == NX_PEER_DEAD || nx_comm_is_dead_locked(c, target))) {
    nx_match_cancel(ep, &r->recv);
    rc = nx_fail(NEXAR_ERR_PEER_LOST, "rpc to rank %u: peer lost (%s)", target,
                 ep->peers[c->members[target]]->why);
    nx_comm_lost_locked(c, nexar_last_error());
  }
  if (!rc) {
    nx_frame f = {0};
    f.kind = NX_KIND_RPC_REQ;
    f.comm_id = c->id;
    f.tag = id;
    f.round = fn_id;
    nexar_iovec v = {(void *)args, args_len};
    rc = nx_ep_send_locked(ep, c->members[target], &f, &v, args_len ? 1 : 0, NULL, NULL);
    if (rc) nx_match_cancel(ep, &r->recv);
  }
  pthread_mutex_unlock(&ep->mu);
  if (!rc) rc = nx_req_wait(r);
  if (!rc && r->recv.status) {
    rc = r->recv.status == NEXAR_ERR_RPC_NO_HANDLER
             ? nx_fail(NEXAR_ERR_RPC_NO_HANDLER, "rpc fn %u to rank %u: no handler registered",
                       fn_id, target)
             : nx_fail(NEXAR_ERR_RPC_FAILED, "rpc fn %u to rank %u: the handler failed", fn_id,
                       target);
  }
  if (!rc) {
    *reply = r->recv.anybuf;
    *reply_len = (size_t)r->recv.anysize;
    r->recv.anybuf = NULL;
  }
  free(r->recv.anybuf);
  nx_req_free(r);
  return rc;
}
