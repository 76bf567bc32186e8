/* nexar._nexar: module init, errors, configuration, helper-thread jobs and
 * cluster formation. See pynx.h for the rules the three files keep. */
#include "pynx.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

PyObject *pynx_CommType, *pynx_ReqType;
static PyObject *pynx_SeedType;
atomic_int pynx_shutting_down;
static PyObject *g_make_error; /* nexar._errors._from_code(code, message) */
PyObject *pynx_adapt;          /* nexar._buffers._adapt(obj) -> (memoryview, dtype) */

int pynx_debug(void) {
  const char *d = getenv("NEXAR_DEBUG");
  return d && *d && strcmp(d, "0") != 0;
}

/* ------------------------------------------------------------- errors */

PyObject *pynx_raise(int code, const char *msg) {
  if (!g_make_error) {
    PyErr_Format(PyExc_RuntimeError, "nexar error %d: %s", code, msg);
    return NULL;
  }
  PyObject *exc = PyObject_CallFunction(g_make_error, "is", code, msg);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

PyObject *pynx_raisef(int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return pynx_raise(code, msg);
}

PyObject *pynx_raise_last(int code) {
  return pynx_raise(code, nexar_last_error());
}

/* --------------------------------------------------------------- jobs */

nxjob *pynx_job_new(int (*run)(nxjob *), nexar_client *c) {
  nxjob *j = calloc(1, sizeof *j);
  if (!j) {
    PyErr_NoMemory();
    return NULL;
  }
  pthread_mutex_init(&j->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&j->cv, &ca);
  pthread_condattr_destroy(&ca);
  j->run = run;
  j->c = c;
  j->refs = 2; /* the helper thread and the caller */
  return j;
}

void pynx_job_free(nxjob *j) {
  if (!j) return;
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  free(j->s1);
  free(j->s2);
  free(j->s3);
  free(j->p1);
  free(j->ranks);
  free(j->outs);
  nexar_free(j->pres);
  free(j);
}

static void *job_thread(void *p) {
  nxjob *j = p;
  int rc = j->run(j);
  pthread_mutex_lock(&j->mu);
  j->rc = rc;
  if (rc) snprintf(j->err, sizeof j->err, "%s", nexar_last_error());
  j->done = 1;
  pthread_cond_broadcast(&j->cv);
  int last = --j->refs == 0;
  pthread_mutex_unlock(&j->mu);
  if (last) { /* the caller gave up on it (Ctrl-C during formation) */
    if (j->discard) j->discard(j);
    pynx_job_free(j);
  }
  return NULL;
}

/* Waits for j in 20 ms slices, the GIL released; 1 when done, 0 when a
 * signal handler raised (error set), waking no later than 20 ms after it. */
static int job_wait_slices(nxjob *j, int interruptible) {
  for (;;) {
    int done;
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&j->mu);
    if (!j->done) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      ts.tv_nsec += 20000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    done = j->done;
    pthread_mutex_unlock(&j->mu);
    Py_END_ALLOW_THREADS if (done) return 1;
    if (interruptible && PyErr_CheckSignals() < 0) return 0;
  }
}

int pynx_job_run(nxjob *j) {
  if (PyThread_get_thread_ident() != pynx_main_thread) {
    /* no KeyboardInterrupt outside the main thread: call it right here */
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = j->run(j);
    if (rc) snprintf(j->err, sizeof j->err, "%s", nexar_last_error());
    Py_END_ALLOW_THREADS j->rc = rc;
    j->done = 1;
    j->refs = 1;
    return 0;
  }
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int e = pthread_create(&t, &at, job_thread, j);
  pthread_attr_destroy(&at);
  if (e) {
    pynx_job_free(j);
    pynx_raise(NEXAR_ERR_IO, "could not start a helper thread");
    return -1;
  }
  if (job_wait_slices(j, 1)) return 0;
  /* Ctrl-C: keep the KeyboardInterrupt, make the call return, drop it */
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (j->c) {
    nexar_abort(j->c); /* documented: an interrupted call aborts its communicator */
    job_wait_slices(j, 0);
    if (j->discard) {
      Py_BEGIN_ALLOW_THREADS j->discard(j);
      Py_END_ALLOW_THREADS
    }
    pynx_job_free(j);
  } else {
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) {
      if (j->discard) {
        Py_BEGIN_ALLOW_THREADS j->discard(j);
        Py_END_ALLOW_THREADS
      }
      pynx_job_free(j);
    }
  }
  PyErr_Restore(et, ev, tb);
  return -1;
}

PyObject *pynx_job_error(nxjob *j) {
  pynx_raise(j->rc, j->err[0] ? j->err : nexar_strerror(j->rc));
  pynx_job_free(j);
  return NULL;
}

static void discard_clients(nxjob *j) {
  if (j->out) nexar_client_del(j->out);
  j->out = NULL;
  for (uint32_t i = 0; j->outs && i < j->nout; i++)
    if (j->outs[i]) nexar_client_del(j->outs[i]);
  j->nout = 0;
}

/* ------------------------------------------------------ configuration */

#define F(name, kind)                                                                              \
  { #name, offsetof(nexar_config, name), kind }
static const struct {
  const char *name;
  size_t off;
  char kind; /* u: uint32, z: size_t, i: int/enum, s: string */
} cfg_fields[] = {
    F(collective_timeout_ms, 'u'),
    F(barrier_timeout_ms, 'u'),
    F(rpc_timeout_ms, 'u'),
    F(connect_timeout_ms, 'u'),
    F(large_msg_bytes, 'z'),
    F(pipeline_segment_bytes, 'z'),
    F(ring_max_world, 'u'),
    F(bulk_transport, 'i'),
    F(encrypt_bulk, 'i'),
    F(compressed_allreduce_max_bytes, 'z'),
    F(heartbeat_interval_ms, 'u'),
    F(heartbeat_timeout_ms, 'u'),
    F(recovery_timeout_ms, 'u'),
    F(recovery_policy, 'i'),
    F(topology, 'i'),
    F(topology_degree, 'u'),
    F(elastic_min_world, 'u'),
    F(elastic_max_world, 'u'),
    F(elastic_checkpoint_timeout_ms, 'u'),
    F(cluster_token, 's'),
    F(bind_addr, 's'),
    F(unexpected_budget_bytes, 'z'),
};
#undef F

/* Fills cfg from the defaults plus the environment, then from d (a dict of
 * field name -> int or str). Strings are copied into j (s2, s3). */
int pynx_cfg_from_dict(PyObject *d, nexar_config *cfg, nxjob *j) {
  int rc = nexar_config_default(cfg);
  if (rc) {
    pynx_raise_last(rc);
    return -1;
  }
  if (!d || d == Py_None) return 0;
  PyObject *key, *val;
  Py_ssize_t pos = 0;
  while (PyDict_Next(d, &pos, &key, &val)) {
    const char *k = PyUnicode_AsUTF8AndSize(key, NULL);
    if (!k) return -1;
    size_t i;
    for (i = 0; i < sizeof cfg_fields / sizeof cfg_fields[0]; i++)
      if (!strcmp(cfg_fields[i].name, k)) break;
    if (i == sizeof cfg_fields / sizeof cfg_fields[0]) {
      pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "config: unknown field '%s'", k);
      return -1;
    }
    char *p = (char *)cfg + cfg_fields[i].off;
    if (cfg_fields[i].kind == 's') {
      char **slot = cfg_fields[i].off == offsetof(nexar_config, cluster_token) ? &j->s2 : &j->s3;
      if (val == Py_None) {
        *(const char **)p = NULL;
        continue;
      }
      const char *s = PyUnicode_AsUTF8AndSize(val, NULL);
      if (!s) return -1;
      free(*slot);
      *slot = strdup(s);
      if (!*slot) {
        PyErr_NoMemory();
        return -1;
      }
      *(const char **)p = *slot;
      continue;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(val);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "config: %s must be a non-negative integer", k);
      return -1;
    }
    if ((cfg_fields[i].kind == 'u' && v > UINT32_MAX) ||
        (cfg_fields[i].kind == 'i' && v > INT32_MAX)) {
      pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "config: %s=%llu is out of range", k, v);
      return -1;
    }
    if (cfg_fields[i].kind == 'u')
      *(uint32_t *)p = (uint32_t)v;
    else if (cfg_fields[i].kind == 'z')
      *(size_t *)p = (size_t)v;
    else
      *(int *)p = (int)v; /* enums are int-sized */
  }
  return 0;
}

static PyObject *config_fields(PyObject *m, PyObject *noarg) {
  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) return pynx_raise_last(rc);
  PyObject *d = PyDict_New();
  for (size_t i = 0; d && i < sizeof cfg_fields / sizeof cfg_fields[0]; i++) {
    const char *p = (const char *)&cfg + cfg_fields[i].off;
    PyObject *v;
    switch (cfg_fields[i].kind) {
    case 'u':
      v = PyLong_FromUnsignedLong(*(const uint32_t *)p);
      break;
    case 'z':
      v = PyLong_FromSize_t(*(const size_t *)p);
      break;
    case 'i':
      v = PyLong_FromLong(*(const int *)p);
      break;
    default: {
      const char *s = *(const char *const *)p;
      v = s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);
    }
    }
    if (!v || PyDict_SetItemString(d, cfg_fields[i].name, v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

/* ----------------------------------------------------- cluster formation */

static int run_bootstrap(nxjob *j) {
  return nexar_bootstrap_local(j->outs, j->nout, &j->cfg);
}

static PyObject *py_bootstrap_local(PyObject *m, PyObject *args) {
  unsigned long n;
  PyObject *cfgd = Py_None;
  if (!PyArg_ParseTuple(args, "k|O", &n, &cfgd)) return NULL;
  if (n == 0 || n > 4096)
    return pynx_raisef(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap_local: world size %lu (1..4096)", n);
  nxjob *j = pynx_job_new(run_bootstrap, NULL);
  if (!j) return NULL;
  j->discard = discard_clients;
  j->outs = calloc(n, sizeof *j->outs);
  if (!j->outs || pynx_cfg_from_dict(cfgd, &j->cfg, j) < 0) {
    if (!j->outs) PyErr_NoMemory();
    pynx_job_free(j);
    return NULL;
  }
  j->nout = (uint32_t)n;
  if (pynx_job_run(j) < 0) return NULL;
  if (j->rc) return pynx_job_error(j);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (uint32_t i = 0; i < n; i++) {
    PyObject *c = list ? pynx_comm_wrap(j->outs[i]) : NULL;
    if (!list) nexar_client_del(j->outs[i]);
    j->outs[i] = NULL;
    if (list && !c) Py_CLEAR(list);
    if (list) PyList_SetItem(list, (Py_ssize_t)i, c);
  }
  pynx_job_free(j);
  return list;
}

static int run_join(nxjob *j) {
  return nexar_join(&j->out, j->s1, &j->cfg);
}

static PyObject *py_join(PyObject *m, PyObject *args) {
  const char *addr;
  PyObject *cfgd = Py_None;
  if (!PyArg_ParseTuple(args, "s|O", &addr, &cfgd)) return NULL;
  nxjob *j = pynx_job_new(run_join, NULL);
  if (!j) return NULL;
  j->discard = discard_clients;
  j->s1 = strdup(addr);
  if (!j->s1 || pynx_cfg_from_dict(cfgd, &j->cfg, j) < 0) {
    if (!j->s1) PyErr_NoMemory();
    pynx_job_free(j);
    return NULL;
  }
  if (pynx_job_run(j) < 0) return NULL;
  if (j->rc) return pynx_job_error(j);
  PyObject *c = pynx_comm_wrap(j->out);
  j->out = NULL;
  pynx_job_free(j);
  return c;
}

static int run_init_env(nxjob *j) {
  return nexar_init_from_env(&j->out);
}

static PyObject *py_init_from_env(PyObject *m, PyObject *noarg) {
  nxjob *j = pynx_job_new(run_init_env, NULL);
  if (!j) return NULL;
  j->discard = discard_clients;
  if (pynx_job_run(j) < 0) return NULL;
  if (j->rc) return pynx_job_error(j);
  PyObject *c = pynx_comm_wrap(j->out);
  j->out = NULL;
  pynx_job_free(j);
  return c;
}

/* --------------------------------------------------------------- Seed */

typedef struct {
  PyObject_HEAD nexar_seed *s;
  int waiters; /* threads inside wait(): close() must not free under them */
} SeedObject;

static PyObject *py_seed_new(PyObject *m, PyObject *args) {
  const char *listen;
  unsigned long world;
  PyObject *cfgd = Py_None;
  if (!PyArg_ParseTuple(args, "sk|O", &listen, &world, &cfgd)) return NULL;
  if (world > UINT32_MAX)
    return pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "Seed: world size too large");
  nxjob *j = pynx_job_new(NULL, NULL); /* only for the config's strings */
  if (!j) return NULL;
  if (pynx_cfg_from_dict(cfgd, &j->cfg, j) < 0) {
    pynx_job_free(j);
    return NULL;
  }
  nexar_seed *s = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = nexar_seed_new(&s, listen, (uint32_t)world, &j->cfg);
  Py_END_ALLOW_THREADS if (rc) {
    pynx_raise_last(rc);
    pynx_job_free(j);
    return NULL;
  }
  pynx_job_free(j);
  allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)pynx_SeedType, Py_tp_alloc);
  SeedObject *o = (SeedObject *)alloc((PyTypeObject *)pynx_SeedType, 0);
  if (!o) {
    nexar_seed_del(s);
    return NULL;
  }
  o->s = s;
  return (PyObject *)o;
}

static int seed_live(SeedObject *o) {
  if (o->s) return 1;
  pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "seed is closed");
  return 0;
}

static PyObject *seed_addr(SeedObject *o, void *x) {
  return seed_live(o) ? PyUnicode_FromString(nexar_seed_addr(o->s)) : NULL;
}
static PyObject *seed_token(SeedObject *o, void *x) {
  return seed_live(o) ? PyUnicode_FromString(nexar_seed_token(o->s)) : NULL;
}

/* Waits in 50 ms slices of nexar_seed_wait, so Ctrl-C interrupts it. */
static PyObject *seed_wait(SeedObject *o, PyObject *args) {
  unsigned long ms = 0;
  if (!PyArg_ParseTuple(args, "|k", &ms)) return NULL;
  if (!seed_live(o)) return NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  o->waiters++;
  PyObject *res = NULL;
  for (;;) {
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = nexar_seed_wait(o->s, 50);
    Py_END_ALLOW_THREADS if (rc != NEXAR_ERR_TIMEOUT) {
      res = rc ? pynx_raise_last(rc) : Py_NewRef(Py_None);
      break;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unsigned long el =
        (unsigned long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
    if (ms && el >= ms) {
      pynx_raisef(NEXAR_ERR_TIMEOUT, "seed wait: the world did not form within %lu ms", ms);
      break;
    }
    if (PyErr_CheckSignals() < 0) break;
  }
  o->waiters--;
  return res;
}

static PyObject *seed_close(SeedObject *o, PyObject *noarg) {
  if (o->waiters)
    return pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "seed close: another thread is in wait()");
  nexar_seed *s = o->s;
  o->s = NULL;
  if (s) {
    Py_BEGIN_ALLOW_THREADS nexar_seed_del(s);
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

static void seed_dealloc(SeedObject *o) {
  PyTypeObject *tp = Py_TYPE((PyObject *)o);
  if (o->s) nexar_seed_del(o->s);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(o);
  Py_DECREF(tp);
}

static PyGetSetDef seed_getset[] = {
    {"addr", (getter)seed_addr, NULL, "The address the seed listens on, \"host:port\".", NULL},
    {"token", (getter)seed_token, NULL, "The cluster token workers must present.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};
static PyMethodDef seed_methods[] = {
    {"wait", (PyCFunction)seed_wait, METH_VARARGS,
     "wait(timeout_ms=0)\n--\n\nWaits until the world has formed (0: no limit)."},
    {"close", (PyCFunction)seed_close, METH_NOARGS, "close()\n--\n\nStops the seed."},
    {NULL, NULL, 0, NULL}};
static PyType_Slot seed_slots[] = {{Py_tp_dealloc, seed_dealloc},
                                   {Py_tp_getset, seed_getset},
                                   {Py_tp_methods, seed_methods},
                                   {Py_tp_doc, "A discovery seed (see nexar.Seed)."},
                                   {0, NULL}};
static PyType_Spec seed_spec = {"nexar._nexar._Seed", sizeof(SeedObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, seed_slots};

/* ------------------------------------------------------------ helpers */

static PyObject *py_set_hooks(PyObject *m, PyObject *args) {
  PyObject *mk, *ad;
  unsigned long main_ident;
  if (!PyArg_ParseTuple(args, "OOk", &mk, &ad, &main_ident)) return NULL;
  pynx_main_thread = main_ident;
  Py_XDECREF(g_make_error);
  g_make_error = Py_NewRef(mk);
  Py_XDECREF(pynx_adapt);
  pynx_adapt = Py_NewRef(ad);
  Py_RETURN_NONE;
}

static PyObject *py_shutdown(PyObject *m, PyObject *noarg) {
  atomic_store(&pynx_shutting_down, 1);
  Py_RETURN_NONE;
}

static PyObject *py_version(PyObject *m, PyObject *noarg) {
  return PyUnicode_FromString(nexar_version());
}

static PyObject *py_strerror(PyObject *m, PyObject *args) {
  int code;
  if (!PyArg_ParseTuple(args, "i", &code)) return NULL;
  return PyUnicode_FromString(nexar_strerror(code));
}

static PyObject *py_dtype_size(PyObject *m, PyObject *args) {
  int dt;
  if (!PyArg_ParseTuple(args, "i", &dt)) return NULL;
  return PyLong_FromSize_t(nexar_dtype_size((nexar_dtype)dt));
}

/* A memoryview over raw memory: for objects that expose a data pointer but
 * not the buffer protocol (CPU torch tensors). The caller keeps the owner. */
static PyObject *py_memory_at(PyObject *m, PyObject *args) {
  unsigned long long addr;
  Py_ssize_t n;
  int readonly = 0;
  if (!PyArg_ParseTuple(args, "Kn|p", &addr, &n, &readonly)) return NULL;
  if (n < 0 || (!addr && n)) return pynx_raise(NEXAR_ERR_INVALID_ARGUMENT, "memory_at: bad region");
  static char empty[1];
  return PyMemoryView_FromMemory(addr ? (char *)(uintptr_t)addr : empty, n,
                                 readonly ? PyBUF_READ : PyBUF_WRITE);
}

static PyMethodDef module_methods[] = {{"bootstrap_local", py_bootstrap_local, METH_VARARGS, NULL},
                                       {"join", py_join, METH_VARARGS, NULL},
                                       {"init_from_env", py_init_from_env, METH_NOARGS, NULL},
                                       {"seed_new", py_seed_new, METH_VARARGS, NULL},
                                       {"config_defaults", config_fields, METH_NOARGS, NULL},
                                       {"_set_hooks", py_set_hooks, METH_VARARGS, NULL},
                                       {"_shutdown", py_shutdown, METH_NOARGS, NULL},
                                       {"version", py_version, METH_NOARGS, NULL},
                                       {"strerror", py_strerror, METH_VARARGS, NULL},
                                       {"dtype_size", py_dtype_size, METH_VARARGS, NULL},
                                       {"memory_at", py_memory_at, METH_VARARGS, NULL},
                                       {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT,
                                    "nexar._nexar",
                                    "The C extension of the nexar package (see nexar).",
                                    -1,
                                    module_methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__nexar(void) {
  PyObject *m = PyModule_Create(&moddef);
  if (!m) return NULL;
  pynx_main_thread = PyThread_get_thread_ident(); /* until _set_hooks says */
  pynx_SeedType = PyType_FromSpec(&seed_spec);
  if (!pynx_SeedType || pynx_req_types_init(m) < 0 || pynx_comm_types_init(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  PyModule_AddIntConstant(m, "COLOR_NONE", (long)NEXAR_COLOR_NONE);
  PyModule_AddIntConstant(m, "HEADER_VERSION", NEXAR_VERSION_NUM);
#define PYNX_ERRCONST_(name, value, text) PyModule_AddIntConstant(m, "ERR_" #name, value);
  NEXAR_ERRNO_MAP(PYNX_ERRCONST_)
#undef PYNX_ERRCONST_
  return m;
}
