/* The C extension behind `import nexar` (nexar._nexar), written against the
 * limited API of Python 3.11 (abi3), so one build serves every later
 * interpreter. Shared declarations of its three files:
 *   module.c  module init, errors, configuration, helper-thread jobs,
 *             cluster formation (bootstrap_local, join, init_from_env, Seed)
 *   comm.c    the Comm type: every operation of a communicator
 *   req.c     buffers (the buffer protocol, dtype from the format) and the
 *             Request type (pinning, sliced waits that wake for Ctrl-C)
 *
 * Rules kept throughout: the GIL is released around every call into the
 * library that may block or take the endpoint lock; a buffer handed to the
 * library stays exported (Py_buffer held) until its request has finished;
 * library threads (failure callbacks, RPC handlers) take the GIL with
 * PyGILState_Ensure and never after interpreter shutdown began. */
#ifndef PYNX_H
#define PYNX_H

#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <nexar/nexar.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* One exported buffer. dt: the nexar dtype its format names, -1 if none. */
typedef struct nxbuf {
  Py_buffer v;
  int have;
  int dt;
  char fmt[8];
  PyObject *keep; /* the original object when it was adapted (torch tensor) */
} nxbuf;

typedef struct failctx failctx;

typedef struct CommObject {
  PyObject_HEAD nexar_client *c;
  int closed;    /* GIL-protected */
  int active;    /* calls in progress on other threads (GIL-protected counter) */
  failctx *fail; /* on_failure callback */
  PyObject *rpc; /* dict fn_id -> capsule of the handler context */
} CommObject;

#define NX_MAXREQ 2
typedef struct ReqObject {
  PyObject_HEAD CommObject *comm;
  nexar_request *req[NX_MAXREQ];
  int nreq;
  nxbuf *bufs;
  int nbufs, capbufs;
  void *mem;        /* counts, displacements, buckets: live until completion */
  PyObject *result; /* what wait() returns */
  const char *what; /* operation name, for messages */
  int finished;     /* requests waited, buffers released */
  int busy;         /* a thread is waiting on it */
  int rc;
  char *err;
} ReqObject;

extern PyObject *pynx_CommType, *pynx_ReqType;
extern atomic_int pynx_shutting_down;
extern unsigned long pynx_main_thread; /* the thread that gets KeyboardInterrupt */

/* errors: raise the nexar.NexarError subclass for code with message msg */
PyObject *pynx_raise(int code, const char *msg);
PyObject *pynx_raisef(int code, const char *fmt, ...);
PyObject *pynx_raise_last(int code); /* message: nexar_last_error() */
int pynx_debug(void);

/* buffers (req.c) */
int pynx_getbuf(PyObject *obj, int writable, nxbuf *b, const char *op, const char *name);
void pynx_relbuf(nxbuf *b);
int pynx_resolve_dtype(int dt_arg, const nxbuf *a, const nxbuf *b, const char *op, int *out);
int pynx_count(const nxbuf *b, int dt, size_t *count, const char *op, const char *name);

/* requests (req.c) */
ReqObject *pynx_req_new(CommObject *comm, const char *what);
nxbuf *pynx_req_buf(ReqObject *r);         /* a zeroed slot, or NULL (MemoryError) */
int pynx_req_reserve(ReqObject *r, int n); /* before the first pynx_req_buf */
PyObject *pynx_req_block(ReqObject *r);    /* the blocking form: abort c on Ctrl-C */
int pynx_req_types_init(PyObject *m);

/* comm.c */
PyObject *pynx_comm_wrap(nexar_client *c); /* steals c (deleted on failure) */
int pynx_comm_types_init(PyObject *m);
int pynx_comm_enter(CommObject *self); /* -1 with an error if closed */
void pynx_comm_leave(CommObject *self);

/* helper-thread jobs (module.c): a library call without an _nb form runs on
 * a helper thread while the caller waits in 20 ms slices for Ctrl-C. */
typedef struct nxjob nxjob;
struct nxjob {
  int (*run)(nxjob *);
  void (*discard)(nxjob *); /* frees unclaimed results (interrupted join) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, refs;
  int rc;
  char err[512];
  nexar_client *c; /* the communicator to abort on Ctrl-C, or NULL */
  nexar_config cfg;
  int have_cfg;
  char *s1, *s2, *s3;
  uint32_t u1, u2, u3;
  size_t z1;
  void *p1;
  size_t plen;
  uint32_t *ranks;
  size_t nranks;
  void *buf1, *buf2; /* borrowed: exported buffers the caller releases */
  const void *cptr;  /* borrowed: a compressor the caller keeps */
  /* results */
  nexar_client *out;
  nexar_client **outs;
  uint32_t nout;
  size_t zres;
  uint32_t ures;
  void *pres;
  size_t preslen;
};
nxjob *pynx_job_new(int (*run)(nxjob *), nexar_client *c);
/* Runs j to completion. 0: finished (look at j->rc, then pynx_job_free);
 * -1: interrupted, a Python error is set and j is no longer the caller's. */
int pynx_job_run(nxjob *j);
void pynx_job_free(nxjob *j);
PyObject *pynx_job_error(nxjob *j); /* raises j->rc with j->err */
int pynx_cfg_from_dict(PyObject *d, nexar_config *cfg, nxjob *j);

#endif
