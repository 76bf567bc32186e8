/* Buffers and requests. A buffer given to an operation is exported with the
 * buffer protocol (so a bytearray cannot be resized and a numpy array not
 * reallocated meanwhile) and released only after the library is done with
 * it: when the request has been waited. In the main thread waiting runs in
 * 20 ms slices with the GIL released, testing the requests (nexar_test) and
 * sleeping briefly, and looks for signals between slices, so Ctrl-C is seen
 * within ~20 ms; other threads (never interrupted) block in nexar_wait. */
#include "pynx.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern PyObject *pynx_adapt;

/* ------------------------------------------------------------ buffers */

/* The nexar dtype a struct-module format code names (sizes from the
 * buffer's itemsize, so '=l' and '@l' both work); -1 if none. */
static int fmt_dtype(const char *f, Py_ssize_t itemsize) {
  if (!f) return NEXAR_U8;
  if (*f == '@' || *f == '=' || *f == '<')
    f++;
  else if (*f == '>' || *f == '!')
    return -1; /* big-endian data */
  if (!f[0] || f[1]) return -1;
  switch (f[0]) {
  case 'f':
    return itemsize == 4 ? NEXAR_F32 : -1;
  case 'd':
    return itemsize == 8 ? NEXAR_F64 : -1;
  case 'e':
    return itemsize == 2 ? NEXAR_F16 : -1;
  case 'b':
    return itemsize == 1 ? NEXAR_I8 : -1;
  case 'B':
  case 'c':
  case '?':
    return itemsize == 1 ? NEXAR_U8 : -1;
  case 'i':
  case 'l':
  case 'q':
  case 'n':
    return itemsize == 4 ? NEXAR_I32 : itemsize == 8 ? NEXAR_I64 : -1;
  case 'I':
  case 'L':
  case 'Q':
  case 'N':
    return itemsize == 4 ? NEXAR_U32 : itemsize == 8 ? NEXAR_U64 : -1;
  default:
    return -1;
  }
}

/* Replaces the pending exception by InvalidArgumentError "op: name: text". */
static int rewrap_error(const char *op, const char *name, const char *what) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  PyErr_NormalizeException(&et, &ev, &tb);
  PyObject *s = ev ? PyObject_Str(ev) : NULL;
  const char *txt = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
  if (!txt) PyErr_Clear();
  pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "%s: %s must be %s (%s)", op, name, what,
              txt ? txt : "not a buffer");
  Py_XDECREF(s);
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
  return -1;
}

int pynx_getbuf(PyObject *obj, int writable, nxbuf *b, const char *op, const char *name) {
  memset(b, 0, sizeof *b);
  b->dt = -1;
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  const char *what = writable ? "a writable C-contiguous buffer" : "a C-contiguous buffer";
  if (!PyObject_CheckBuffer(obj)) {
    /* torch tensors and __array_interface__ objects: the Python layer gives
     * a memoryview over their memory and their dtype; the object is kept */
    PyObject *t = pynx_adapt ? PyObject_CallFunctionObjArgs(pynx_adapt, obj, NULL) : NULL;
    if (!t) return rewrap_error(op, name, what);
    PyObject *mv;
    int dt;
    if (!PyArg_ParseTuple(t, "Oi", &mv, &dt) || PyObject_GetBuffer(mv, &b->v, flags) < 0) {
      Py_DECREF(t);
      return rewrap_error(op, name, what);
    }
    Py_DECREF(t);
    b->keep = Py_NewRef(obj);
    b->dt = dt;
    snprintf(b->fmt, sizeof b->fmt, "%s", "adapted");
  } else {
    if (PyObject_GetBuffer(obj, &b->v, flags) < 0) return rewrap_error(op, name, what);
    b->dt = fmt_dtype(b->v.format, b->v.itemsize);
    snprintf(b->fmt, sizeof b->fmt, "%s", b->v.format ? b->v.format : "B");
  }
  b->have = 1;
  return 0;
}

void pynx_relbuf(nxbuf *b) {
  if (b->have) PyBuffer_Release(&b->v);
  b->have = 0;
  Py_CLEAR(b->keep);
}

static const char *dt_name(int dt) {
  return nexar_dtype_name((nexar_dtype)dt);
}

int pynx_resolve_dtype(int dt_arg, const nxbuf *a, const nxbuf *b, const char *op, int *out) {
  if (dt_arg >= 0) {
    if (!nexar_dtype_size((nexar_dtype)dt_arg)) {
      pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", op, dt_arg);
      return -1;
    }
    *out = dt_arg;
    return 0;
  }
  const nxbuf *first = a && a->have ? a : b && b->have ? b : NULL;
  if (!first) {
    *out = NEXAR_U8; /* no data on this rank */
    return 0;
  }
  if (first->dt < 0) {
    pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT,
                "%s: no nexar dtype for buffer format '%s'; pass dtype= (f32 f64 f16 bf16 i8 i32 "
                "i64 u8 u32 u64)",
                op, first->fmt);
    return -1;
  }
  if (a && b && a->have && b->have && b->dt != a->dt) {
    pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT,
                "%s: the buffers' element types differ (%s and %s, formats '%s' and '%s'); pass "
                "dtype= to treat both as one type",
                op, b->dt < 0 ? "?" : dt_name(a->dt), b->dt < 0 ? "?" : dt_name(b->dt), a->fmt,
                b->fmt);
    return -1;
  }
  *out = first->dt;
  return 0;
}

int pynx_count(const nxbuf *b, int dt, size_t *count, const char *op, const char *name) {
  size_t sz = nexar_dtype_size((nexar_dtype)dt);
  if (!b->have) {
    *count = 0;
    return 0;
  }
  if ((size_t)b->v.len % sz) {
    pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "%s: %s has %zd bytes, not a multiple of %s's %zu", op,
                name, b->v.len, dt_name(dt), sz);
    return -1;
  }
  *count = (size_t)b->v.len / sz;
  return 0;
}

/* ----------------------------------------------------------- requests */

ReqObject *pynx_req_new(CommObject *comm, const char *what) {
  allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)pynx_ReqType, Py_tp_alloc);
  ReqObject *r = (ReqObject *)alloc((PyTypeObject *)pynx_ReqType, 0);
  if (!r) return NULL;
  r->comm = comm;
  Py_XINCREF((PyObject *)comm);
  r->what = what;
  r->result = Py_NewRef(Py_None);
  return r;
}

/* Room for n buffers at once, before any is exported (growing the array
 * later moves exported Py_buffers, which the exporters we know tolerate,
 * but the pointers rbuf handed out would dangle). */
int pynx_req_reserve(ReqObject *r, int n) {
  if (n <= r->capbufs) return 0;
  nxbuf *nb = realloc(r->bufs, (size_t)n * sizeof *nb);
  if (!nb) {
    PyErr_NoMemory();
    return -1;
  }
  r->bufs = nb;
  r->capbufs = n;
  return 0;
}

nxbuf *pynx_req_buf(ReqObject *r) {
  if (r->nbufs == r->capbufs) {
    int cap = r->capbufs ? 2 * r->capbufs : 4;
    nxbuf *nb = realloc(r->bufs, (size_t)cap * sizeof *nb);
    if (!nb) {
      PyErr_NoMemory();
      return NULL;
    }
    r->bufs = nb;
    r->capbufs = cap;
  }
  nxbuf *b = &r->bufs[r->nbufs++];
  memset(b, 0, sizeof *b);
  b->dt = -1;
  return b;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int all_done(ReqObject *r) {
  for (int i = 0; i < r->nreq; i++) {
    int d = 1;
    if (r->req[i] && nexar_test(r->req[i], &d) == 0 && !d) return 0;
  }
  return 1;
}

/* GIL held on entry and exit. 1 once every request has finished; 0 when a
 * signal handler raised (interruptible only; the requests stay pending). */
static int wait_done(ReqObject *r, int interruptible) {
  /* nexar_test may take the endpoint lock (a timeout): only without the GIL */
  int spins = 0;
  uint64_t start = now_ns();
  for (;;) {
    int done = 0;
    Py_BEGIN_ALLOW_THREADS uint64_t t0 = now_ns();
    for (;;) {
      if (all_done(r)) {
        done = 1;
        break;
      }
      uint64_t t = now_ns();
      if (t - t0 >= 20000000ull) break;
      if (spins < 50) { /* replies often land within tens of microseconds */
        spins++;
        sched_yield();
        continue;
      }
      /* sleep an eighth of the time waited so far (20 us .. 1 ms): a late
       * look costs at most ~12% of the operation's time */
      uint64_t s = (t - start) / 8;
      if (s < 20000) s = 20000;
      if (s > 1000000) s = 1000000;
      struct timespec ts = {0, (long)s};
      nanosleep(&ts, NULL);
    }
    Py_END_ALLOW_THREADS if (done) return 1;
    if (interruptible && PyErr_CheckSignals() < 0) return 0;
  }
}

unsigned long pynx_main_thread;

/* Only the main thread ever sees KeyboardInterrupt: another thread waits in
 * nexar_wait itself (which drives the endpoint, the fastest wake-up). */
static int may_be_interrupted(void) {
  return PyThread_get_thread_ident() == pynx_main_thread;
}

static void wait_plain(ReqObject *r) {
  Py_BEGIN_ALLOW_THREADS for (int i = 0; i < r->nreq; i++) {
    if (!r->req[i]) continue;
    int rc = nexar_wait(r->req[i]);
    r->req[i] = NULL;
    if (rc && !r->rc) {
      r->rc = rc;
      r->err = strdup(nexar_last_error());
    }
  }
  Py_END_ALLOW_THREADS
}

/* Every request finished: collect the first error, release the buffers. */
static void finish(ReqObject *r) {
  for (int i = 0; i < r->nreq; i++) {
    if (!r->req[i]) continue;
    int rc = nexar_wait(r->req[i]);
    r->req[i] = NULL;
    if (rc && !r->rc) {
      r->rc = rc;
      r->err = strdup(nexar_last_error());
    }
  }
  for (int i = 0; i < r->nbufs; i++)
    pynx_relbuf(&r->bufs[i]);
  r->nbufs = 0;
  free(r->mem);
  r->mem = NULL;
  r->finished = 1;
}

static PyObject *outcome(ReqObject *r) {
  if (r->rc) return pynx_raise(r->rc, r->err ? r->err : nexar_strerror(r->rc));
  return Py_NewRef(r->result);
}

PyObject *pynx_req_block(ReqObject *r) {
  CommObject *c = r->comm;
  int entered = c && pynx_comm_enter(c) == 0;
  if (c && !entered) PyErr_Clear(); /* closed meanwhile: the request ends ABORTED */
  r->busy = 1;
  if (!may_be_interrupted())
    wait_plain(r);
  else if (!wait_done(r, 1)) {
    /* Ctrl-C in a blocking call: its partners cannot be told to cancel one
     * rank's part, so the communicator is aborted (peers fail at once with
     * ABORTED instead of waiting for a timeout); then the request ends at
     * once and the KeyboardInterrupt propagates. */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (entered) nexar_abort(c->c);
    wait_done(r, 0);
    finish(r);
    PyErr_Restore(et, ev, tb);
    r->busy = 0;
    if (entered) pynx_comm_leave(c);
    Py_DECREF(r);
    return NULL;
  }
  finish(r);
  r->busy = 0;
  if (entered) pynx_comm_leave(c);
  PyObject *res = outcome(r);
  Py_DECREF(r);
  return res;
}

static PyObject *req_wait(ReqObject *r, PyObject *noarg) {
  if (r->finished) return outcome(r);
  if (r->busy)
    return pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "wait: another thread waits on this request");
  r->busy = 1;
  int ok = 1;
  if (!may_be_interrupted())
    wait_plain(r);
  else
    ok = wait_done(r, 1);
  if (ok) finish(r);
  r->busy = 0;
  if (!ok) return NULL; /* KeyboardInterrupt; the request is still pending */
  return outcome(r);
}

static PyObject *req_test(ReqObject *r, PyObject *noarg) {
  if (r->finished) Py_RETURN_TRUE;
  if (r->busy) Py_RETURN_FALSE;
  int done;
  r->busy = 1; /* one thread at a time on a request */
  Py_BEGIN_ALLOW_THREADS done = all_done(r);
  Py_END_ALLOW_THREADS r->busy = 0;
  if (!done) Py_RETURN_FALSE;
  finish(r);
  Py_RETURN_TRUE;
}

static PyObject *req_repr(ReqObject *r) {
  return PyUnicode_FromFormat("<nexar.Request %s %s>", r->what ? r->what : "?",
                              r->finished ? (r->rc ? "failed" : "done") : "pending");
}

static void req_dealloc(ReqObject *r) {
  PyTypeObject *tp = Py_TYPE((PyObject *)r);
  if (!r->finished && r->nreq) {
    /* dropping a pending request waits for it: its buffers are in use */
    Py_BEGIN_ALLOW_THREADS for (int i = 0; i < r->nreq; i++) if (r->req[i]) {
      nexar_wait(r->req[i]);
      r->req[i] = NULL;
    }
    Py_END_ALLOW_THREADS
  }
  for (int i = 0; i < r->nbufs; i++)
    pynx_relbuf(&r->bufs[i]);
  free(r->bufs);
  free(r->mem);
  free(r->err);
  Py_XDECREF(r->result);
  Py_XDECREF((PyObject *)r->comm);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(r);
  Py_DECREF(tp);
}

static PyMethodDef req_methods[] = {
    {"wait", (PyCFunction)req_wait, METH_NOARGS,
     "wait()\n--\n\nBlocks (GIL released) until the operation has finished, then returns its "
     "result (the output buffer, or None) or raises its NexarError. Waiting again returns the "
     "same. Ctrl-C raises KeyboardInterrupt within ~20 ms and leaves the request pending (its "
     "buffers stay exported); wait() may be called again."},
    {"test", (PyCFunction)req_test, METH_NOARGS,
     "test()\n--\n\nTrue once the operation has finished (failed or not; wait() gives the "
     "result). Never blocks."},
    {NULL, NULL, 0, NULL}};
static PyType_Slot req_slots[] = {
    {Py_tp_dealloc, req_dealloc},
    {Py_tp_methods, req_methods},
    {Py_tp_repr, req_repr},
    {Py_tp_doc, "An operation in flight (async_op=True). Keeps its buffers exported until it "
                "has finished; dropping an unfinished request waits for it (up to the "
                "operation's timeout), so the library never writes into freed memory."},
    {0, NULL}};
static PyType_Spec req_spec = {"nexar.Request", sizeof(ReqObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, req_slots};

int pynx_req_types_init(PyObject *m) {
  pynx_ReqType = PyType_FromSpec(&req_spec);
  if (!pynx_ReqType) return -1;
  Py_INCREF(pynx_ReqType);
  return PyModule_AddObject(m, "Request", pynx_ReqType);
}
