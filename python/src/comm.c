/* The Comm type: one communicator (nexar_client) and every operation on it.
 * Operations with an _nb form start it and either return the Request
 * (async) or wait for it (blocking, pynx_req_block); the others run on a
 * helper thread (pynx_job_run). Buffer sizes are checked here against what the
 * library will read or write, since it cannot know a buffer's length. */
#include "pynx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct failctx {
  PyObject *fn;
};
typedef struct {
  PyObject *fn;
} rpcctx;

int pynx_comm_enter(CommObject *self) {
  if (self->closed || !self->c) {
    pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "the client is closed");
    return -1;
  }
  self->active++;
  return 0;
}

void pynx_comm_leave(CommObject *self) {
  self->active--;
}

PyObject *pynx_comm_wrap(nexar_client *c) {
  allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)pynx_CommType, Py_tp_alloc);
  CommObject *o = (CommObject *)alloc((PyTypeObject *)pynx_CommType, 0);
  if (o) o->rpc = PyDict_New();
  if (!o || !o->rpc) {
    Py_XDECREF((PyObject *)o);
    Py_BEGIN_ALLOW_THREADS nexar_client_del(c);
    Py_END_ALLOW_THREADS return NULL;
  }
  o->c = c;
  return (PyObject *)o;
}

/* ----------------------------------------------------- argument checks */

static int rank_arg(long long v, const char *op, const char *name, uint32_t *out) {
  if (v < 0 || v > (long long)UINT32_MAX) {
    pynx_raisef(NEXAR_ERR_INVALID_RANK, "%s: %s %lld is not a rank", op, name, v);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

static int tag_arg(long long v, const char *op, uint32_t *out) {
  if (v < 0 || v > (long long)UINT32_MAX) {
    pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "%s: tag %lld outside 0..2**32-1", op, v);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

static int size_eq(const nxbuf *b, size_t want, const char *op, const char *name) {
  if ((size_t)b->v.len == want) return 0;
  pynx_raisef(NEXAR_ERR_SIZE_MISMATCH, "%s: %s has %zd bytes, the operation needs %zu", op, name,
              b->v.len, want);
  return -1;
}

/* Exports obj into a new buffer slot of r (obj None: an empty slot). */
static nxbuf *rbuf(ReqObject *r, PyObject *obj, int writable, const char *name) {
  nxbuf *b = pynx_req_buf(r);
  if (!b) return NULL;
  if (obj == Py_None) return b;
  if (pynx_getbuf(obj, writable, b, r->what, name) < 0) return NULL;
  return b;
}

static void pynx_set_result(ReqObject *r, PyObject *o) {
  PyObject *old = r->result;
  r->result = o;
  Py_XDECREF(old);
}

static void *bptr(const nxbuf *b) {
  return b->have ? b->v.buf : NULL;
}

#define START(self, r, call)                                                                       \
  do {                                                                                             \
    int rc_;                                                                                       \
    if (pynx_comm_enter(self) < 0) goto fail;                                                      \
    r->nreq = 1;                                                                                   \
    Py_BEGIN_ALLOW_THREADS rc_ = (call);                                                           \
    Py_END_ALLOW_THREADS pynx_comm_leave(self);                                                    \
    if (rc_) {                                                                                     \
      pynx_raise_last(rc_);                                                                        \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

#define FINISH(r, async) return (async) ? (PyObject *)(r) : pynx_req_block(r)

static int live(CommObject *self) {
  if (self->closed || !self->c) {
    pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "the client is closed");
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------- point-to-point */

static PyObject *c_send(CommObject *self, PyObject *args) {
  PyObject *o;
  long long dest, tag;
  int async;
  if (!PyArg_ParseTuple(args, "OLLp", &o, &dest, &tag, &async) || !live(self)) return NULL;
  uint32_t d, t;
  if (rank_arg(dest, "send", "dest", &d) < 0 || tag_arg(tag, "send", &t) < 0) return NULL;
  ReqObject *r = pynx_req_new(self, "send");
  if (!r) return NULL;
  nxbuf *b = rbuf(r, o, 0, "buf");
  if (!b) goto fail;
  START(self, r, nexar_send_nb(self->c, b->v.buf, (size_t)b->v.len, d, t, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

static PyObject *c_recv(CommObject *self, PyObject *args) {
  PyObject *o;
  long long src, tag;
  int async;
  if (!PyArg_ParseTuple(args, "OLLp", &o, &src, &tag, &async) || !live(self)) return NULL;
  uint32_t s, t;
  if (rank_arg(src, "recv", "src", &s) < 0 || tag_arg(tag, "recv", &t) < 0) return NULL;
  ReqObject *r = pynx_req_new(self, "recv");
  if (!r) return NULL;
  nxbuf *b = rbuf(r, o, 1, "buf");
  if (!b) goto fail;
  pynx_set_result(r, Py_NewRef(o));
  START(self, r, nexar_recv_nb(self->c, b->v.buf, (size_t)b->v.len, s, t, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

/* Both halves as non-blocking requests, so neither waits for the other. */
static PyObject *c_sendrecv(CommObject *self, PyObject *args) {
  PyObject *so, *ro;
  long long dest, stag, src, rtag;
  int async;
  if (!PyArg_ParseTuple(args, "OLLOLLp", &so, &dest, &stag, &ro, &src, &rtag, &async) ||
      !live(self))
    return NULL;
  uint32_t d, st, s, rt;
  if (rank_arg(dest, "sendrecv", "dest", &d) < 0 || rank_arg(src, "sendrecv", "src", &s) < 0 ||
      tag_arg(stag, "sendrecv", &st) < 0 || tag_arg(rtag, "sendrecv", &rt) < 0)
    return NULL;
  uint32_t n = nexar_world_size(self->c);
  if (d >= n || s >= n)
    return pynx_raisef(NEXAR_ERR_INVALID_RANK, "sendrecv: rank %u outside a world of %u",
                       d >= n ? d : s, n);
  ReqObject *r = pynx_req_new(self, "sendrecv");
  if (!r) return NULL;
  nxbuf *sb = rbuf(r, so, 0, "sendbuf"), *rb = sb ? rbuf(r, ro, 1, "recvbuf") : NULL;
  if (!rb) goto fail;
  pynx_set_result(r, Py_NewRef(ro));
  char *s0 = sb->v.buf, *r0 = rb->v.buf;
  if (sb->v.len && rb->v.len && s0 < r0 + rb->v.len && r0 < s0 + sb->v.len) {
    pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "sendrecv: the two buffers overlap");
    goto fail;
  }
  START(self, r, nexar_recv_nb(self->c, rb->v.buf, (size_t)rb->v.len, s, rt, &r->req[0]));
  int rc;
  if (pynx_comm_enter(self) < 0) goto fail;
  r->nreq = 2;
  Py_BEGIN_ALLOW_THREADS rc =
      nexar_send_nb(self->c, sb->v.buf, (size_t)sb->v.len, d, st, &r->req[1]);
  Py_END_ALLOW_THREADS pynx_comm_leave(self);
  if (rc) {
    /* the receive is posted: it must end before its buffer is released */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", nexar_last_error());
    nexar_abort(self->c);
    pynx_raise(rc, msg);
    goto fail;
  }
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

/* --------------------------------------------------------- collectives */

/* in place on buf: all_reduce, all_reduce_rs_ag, scan, exclusive_scan */
typedef int (*inplace_fn)(nexar_client *, void *, size_t, nexar_dtype, nexar_op, nexar_request **);

static PyObject *inplace_op(CommObject *self, PyObject *args, const char *what, inplace_fn fn) {
  PyObject *o;
  int dt, op, async;
  if (!PyArg_ParseTuple(args, "Oiip", &o, &dt, &op, &async) || !live(self)) return NULL;
  ReqObject *r = pynx_req_new(self, what);
  if (!r) return NULL;
  nxbuf *b = rbuf(r, o, 1, "buf");
  size_t count;
  if (!b || pynx_resolve_dtype(dt, b, NULL, what, &dt) < 0 ||
      pynx_count(b, dt, &count, what, "buf") < 0)
    goto fail;
  pynx_set_result(r, Py_NewRef(o));
  START(self, r, fn(self->c, b->v.buf, count, (nexar_dtype)dt, (nexar_op)op, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

static PyObject *c_all_reduce(CommObject *s, PyObject *a) {
  return inplace_op(s, a, "all_reduce", nexar_all_reduce_nb);
}
static PyObject *c_all_reduce_rs_ag(CommObject *s, PyObject *a) {
  return inplace_op(s, a, "all_reduce_rs_ag", nexar_all_reduce_rs_ag_nb);
}
static PyObject *c_scan(CommObject *s, PyObject *a) {
  return inplace_op(s, a, "scan", nexar_scan_nb);
}
static PyObject *c_exclusive_scan(CommObject *s, PyObject *a) {
  return inplace_op(s, a, "exclusive_scan", nexar_exclusive_scan_nb);
}

static PyObject *c_broadcast(CommObject *self, PyObject *args) {
  PyObject *o;
  int dt, async;
  long long root;
  if (!PyArg_ParseTuple(args, "OiLp", &o, &dt, &root, &async) || !live(self)) return NULL;
  uint32_t rt;
  if (rank_arg(root, "broadcast", "root", &rt) < 0) return NULL;
  ReqObject *r = pynx_req_new(self, "broadcast");
  if (!r) return NULL;
  /* the root's buffer is only read */
  nxbuf *b = rbuf(r, o, rt != nexar_rank(self->c), "buf");
  size_t count;
  if (!b || pynx_resolve_dtype(dt, b, NULL, "broadcast", &dt) < 0 ||
      pynx_count(b, dt, &count, "broadcast", "buf") < 0)
    goto fail;
  pynx_set_result(r, Py_NewRef(o));
  START(self, r, nexar_broadcast_nb(self->c, b->v.buf, count, (nexar_dtype)dt, rt, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

static PyObject *c_reduce(CommObject *self, PyObject *args) {
  PyObject *o;
  int dt, op, async;
  long long root;
  if (!PyArg_ParseTuple(args, "OiiLp", &o, &dt, &op, &root, &async) || !live(self)) return NULL;
  uint32_t rt;
  if (rank_arg(root, "reduce", "root", &rt) < 0) return NULL;
  ReqObject *r = pynx_req_new(self, "reduce");
  if (!r) return NULL;
  nxbuf *b = rbuf(r, o, rt == nexar_rank(self->c), "buf");
  size_t count;
  if (!b || pynx_resolve_dtype(dt, b, NULL, "reduce", &dt) < 0 ||
      pynx_count(b, dt, &count, "reduce", "buf") < 0)
    goto fail;
  pynx_set_result(r, Py_NewRef(o));
  START(self, r,
        nexar_reduce_nb(self->c, b->v.buf, count, (nexar_dtype)dt, (nexar_op)op, rt, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

/* send/recv pairs. kind: 0 all_gather (recv = n*send), 1 reduce_scatter
 * (send = n*recv), 2 all_to_all (equal, divisible by n) */
static PyObject *pair_op(CommObject *self, PyObject *args, int kind) {
  static const char *names[] = {"all_gather", "reduce_scatter", "all_to_all"};
  const char *what = names[kind];
  PyObject *so, *ro;
  int dt, op = 0, async;
  int ok = kind == 1 ? PyArg_ParseTuple(args, "OOiip", &so, &ro, &dt, &op, &async)
                     : PyArg_ParseTuple(args, "OOip", &so, &ro, &dt, &async);
  if (!ok || !live(self)) return NULL;
  size_t n = nexar_world_size(self->c);
  ReqObject *r = pynx_req_new(self, what);
  if (!r) return NULL;
  nxbuf *sb = rbuf(r, so, 0, "send"), *rb = sb ? rbuf(r, ro, 1, "recv") : NULL;
  size_t scount, rcount, count;
  if (!rb || pynx_resolve_dtype(dt, sb, rb, what, &dt) < 0 ||
      pynx_count(sb, dt, &scount, what, "send") < 0 ||
      pynx_count(rb, dt, &rcount, what, "recv") < 0)
    goto fail;
  size_t sz = nexar_dtype_size((nexar_dtype)dt);
  if (kind == 0) {
    count = scount;
    if (size_eq(rb, count * n * sz, what, "recv") < 0) goto fail;
  } else if (kind == 1) {
    count = rcount;
    if (size_eq(sb, count * n * sz, what, "send") < 0) goto fail;
  } else {
    if (size_eq(rb, (size_t)sb->v.len, what, "recv") < 0) goto fail;
    if (scount % n) {
      pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT,
                  "all_to_all: %zu elements do not split into %zu blocks", scount, n);
      goto fail;
    }
    count = scount / n;
  }
  pynx_set_result(r, Py_NewRef(ro));
  if (kind == 0)
    START(self, r,
          nexar_all_gather_nb(self->c, bptr(sb), bptr(rb), count, (nexar_dtype)dt, &r->req[0]));
  else if (kind == 1)
    START(self, r,
          nexar_reduce_scatter_nb(self->c, bptr(sb), bptr(rb), count, (nexar_dtype)dt, (nexar_op)op,
                                  &r->req[0]));
  else
    START(self, r,
          nexar_all_to_all_nb(self->c, bptr(sb), bptr(rb), count, (nexar_dtype)dt, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

static PyObject *c_all_gather(CommObject *s, PyObject *a) {
  return pair_op(s, a, 0);
}
static PyObject *c_reduce_scatter(CommObject *s, PyObject *a) {
  return pair_op(s, a, 1);
}
static PyObject *c_all_to_all(CommObject *s, PyObject *a) {
  return pair_op(s, a, 2);
}

/* gather (is_scatter 0): send everywhere, recv[n*count] at the root;
 * scatter (1): send[n*count] at the root, recv everywhere. */
static PyObject *rooted_op(CommObject *self, PyObject *args, int is_scatter) {
  const char *what = is_scatter ? "scatter" : "gather";
  PyObject *so, *ro;
  int dt, async;
  long long root;
  if (!PyArg_ParseTuple(args, "OOiLp", &so, &ro, &dt, &root, &async) || !live(self)) return NULL;
  uint32_t rt;
  if (rank_arg(root, what, "root", &rt) < 0) return NULL;
  int at_root = rt == nexar_rank(self->c);
  size_t n = nexar_world_size(self->c);
  ReqObject *r = pynx_req_new(self, what);
  if (!r) return NULL;
  /* the buffer a non-root does not use is neither exported nor passed */
  PyObject *sarg = (!is_scatter || at_root) ? so : Py_None;
  PyObject *rarg = (is_scatter || at_root) ? ro : Py_None;
  if ((sarg == Py_None && (!is_scatter || at_root)) ||
      (rarg == Py_None && (is_scatter || at_root))) {
    pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "%s: rank %u needs its %s buffer", what,
                nexar_rank(self->c), sarg == Py_None ? "send" : "recv");
    goto fail;
  }
  nxbuf *sb = rbuf(r, sarg, 0, "send"), *rb = sb ? rbuf(r, rarg, 1, "recv") : NULL;
  size_t scount, rcount, count;
  if (!rb || pynx_resolve_dtype(dt, sb, rb, what, &dt) < 0 ||
      pynx_count(sb, dt, &scount, what, "send") < 0 ||
      pynx_count(rb, dt, &rcount, what, "recv") < 0)
    goto fail;
  size_t sz = nexar_dtype_size((nexar_dtype)dt);
  if (!is_scatter) {
    count = scount;
    if (at_root && size_eq(rb, count * n * sz, what, "recv") < 0) goto fail;
  } else {
    count = rcount;
    if (at_root && size_eq(sb, count * n * sz, what, "send") < 0) goto fail;
  }
  pynx_set_result(r, Py_NewRef(rarg));
  if (is_scatter)
    START(self, r,
          nexar_scatter_nb(self->c, bptr(sb), bptr(rb), count, (nexar_dtype)dt, rt, &r->req[0]));
  else
    START(self, r,
          nexar_gather_nb(self->c, bptr(sb), bptr(rb), count, (nexar_dtype)dt, rt, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

static PyObject *c_gather(CommObject *s, PyObject *a) {
  return rooted_op(s, a, 0);
}
static PyObject *c_scatter(CommObject *s, PyObject *a) {
  return rooted_op(s, a, 1);
}

static PyObject *c_barrier(CommObject *self, PyObject *args) {
  int async;
  if (!PyArg_ParseTuple(args, "p", &async) || !live(self)) return NULL;
  ReqObject *r = pynx_req_new(self, "barrier");
  if (!r) return NULL;
  START(self, r, nexar_barrier_nb(self->c, &r->req[0]));
  FINISH(r, async);
fail:
  Py_DECREF(r);
  return NULL;
}

static PyObject *c_all_reduce_bucketed(CommObject *self, PyObject *args) {
  PyObject *seq;
  int dt, op, async;
  if (!PyArg_ParseTuple(args, "Oiip", &seq, &dt, &op, &async) || !live(self)) return NULL;
  PyObject *list = PySequence_List(seq);
  if (!list) return NULL;
  Py_ssize_t nb = PyList_Size(list);
  ReqObject *r = pynx_req_new(self, "all_reduce_bucketed");
  if (!r) {
    Py_DECREF(list);
    return NULL;
  }
  nexar_bucket *bk = calloc(nb ? (size_t)nb : 1, sizeof *bk);
  r->mem = bk;
  if (nb > INT32_MAX / 2) {
    pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "all_reduce_bucketed: too many buckets");
    goto fail;
  }
  if (pynx_req_reserve(r, (int)nb + 1) < 0) goto fail;
  if (!bk) {
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t i = 0; i < nb; i++) {
    nxbuf *b = rbuf(r, PyList_GetItem(list, i), 1, "bucket");
    int bdt;
    if (!b || pynx_resolve_dtype(dt, b, NULL, "all_reduce_bucketed", &bdt) < 0) goto fail;
    if (i == 0 && dt < 0) dt = bdt;
    if (bdt != dt) {
      pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "all_reduce_bucketed: bucket %zd is %s, not %s", i,
                  nexar_dtype_name((nexar_dtype)bdt), nexar_dtype_name((nexar_dtype)dt));
      goto fail;
    }
    if (pynx_count(b, dt, &bk[i].count, "all_reduce_bucketed", "bucket") < 0) goto fail;
    bk[i].buf = b->v.buf;
  }
  if (dt < 0) dt = NEXAR_F32;
  pynx_set_result(r, Py_NewRef(list));
  START(self, r,
        nexar_all_reduce_bucketed_nb(self->c, bk, (size_t)nb, (nexar_dtype)dt, (nexar_op)op,
                                     &r->req[0]));
  Py_DECREF(list);
  FINISH(r, async);
fail:
  Py_DECREF(list);
  Py_DECREF(r);
  return NULL;
}

#include "comm_v.inc"   /* the variable-count collectives */
#include "comm_ctl.inc" /* control calls, failure and RPC callbacks, the type */
