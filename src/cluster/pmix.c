/* PMIx client (Open MPI's mpirun, srun --mpi=pmix): libpmix is loaded at run
 * time with dlopen, so libnexar never links it and runs where it is absent.
 * The PMIx types come from its headers at build time when CMake finds them
 * (Debian libpmix-dev; NX_HAVE_PMIX); without them this path reports
 * NEXAR_ERR_UNSUPPORTED. */
#include "cluster/launch.h"

#include <stdlib.h>
#include <string.h>

#ifdef NX_HAVE_PMIX
#include <dlfcn.h>
#include <pmix.h>

typedef struct pmixc {
  nx_kvs base;
  void *lib;
  pmix_proc_t me;
  __typeof__(PMIx_Init) *init;
  __typeof__(PMIx_Finalize) *finalize;
  __typeof__(PMIx_Put) *put;
  __typeof__(PMIx_Commit) *commit;
  __typeof__(PMIx_Fence) *fence;
  __typeof__(PMIx_Get) *get;
  __typeof__(PMIx_Value_destruct) *value_destruct;
  __typeof__(PMIx_Error_string) *error_string;
} pmixc;

static const char *err_str(pmixc *p, pmix_status_t st) {
  const char *s = p->error_string ? p->error_string(st) : NULL;
  return s ? s : "?";
}

static void value_free(pmixc *p, pmix_value_t *v) {
  if (!v) return;
  p->value_destruct(v);
  free(v);
}

/* A value of proc for key, as a number (PMIx servers differ in the integer
 * type they answer with). */
static int get_u32(pmixc *p, const pmix_proc_t *proc, const char *key, uint32_t *out) {
  pmix_value_t *v = NULL;
  pmix_status_t st = p->get(proc, key, NULL, 0, &v);
  if (st != PMIX_SUCCESS || !v)
    return nx_fail(NEXAR_ERR_IO, "PMIx_Get(%s): %s", key, err_str(p, st));
  int rc = 0;
  switch (v->type) {
  case PMIX_UINT32:
    *out = v->data.uint32;
    break;
  case PMIX_UINT16:
    *out = v->data.uint16;
    break;
  case PMIX_INT:
    rc = v->data.integer < 0;
    *out = (uint32_t)v->data.integer;
    break;
  case PMIX_PROC_RANK:
    *out = v->data.rank;
    break;
  default:
    rc = 1;
  }
  value_free(p, v);
  if (rc) return nx_fail(NEXAR_ERR_PROTOCOL, "PMIx_Get(%s): not a non-negative integer", key);
  return 0;
}

static void info_set(pmix_info_t *i, const char *key) {
  memset(i, 0, sizeof *i);
  snprintf(i->key, sizeof i->key, "%s", key);
}

static int pmix_share(nx_kvs *kvs, const char *val, char *out, size_t cap, uint32_t timeout_ms) {
  pmixc *p = (pmixc *)kvs;
  pmix_status_t st;
  if (val) {
    pmix_value_t v;
    memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = (char *)val;
    if ((st = p->put(PMIX_GLOBAL, NX_LAUNCH_SEED_KEY, &v)) != PMIX_SUCCESS)
      return nx_fail(NEXAR_ERR_IO, "PMIx_Put(" NX_LAUNCH_SEED_KEY "): %s", err_str(p, st));
    if ((st = p->commit()) != PMIX_SUCCESS)
      return nx_fail(NEXAR_ERR_IO, "PMIx_Commit: %s", err_str(p, st));
  }
  pmix_info_t info[2];
  info_set(&info[0], PMIX_COLLECT_DATA);
  info[0].value.type = PMIX_BOOL;
  info[0].value.data.flag = true;
  size_t ninfo = 1;
  if (timeout_ms) {
    info_set(&info[1], PMIX_TIMEOUT);
    info[1].value.type = PMIX_INT;
    info[1].value.data.integer = (int)NX_MIN(timeout_ms / 1000u + 1, (uint32_t)INT32_MAX);
    ninfo = 2;
  }
  pmix_proc_t all;
  memset(&all, 0, sizeof all);
  memcpy(all.nspace, p->me.nspace, sizeof all.nspace);
  all.rank = PMIX_RANK_WILDCARD;
  if ((st = p->fence(&all, 1, info, ninfo)) != PMIX_SUCCESS)
    return nx_fail(st == PMIX_ERR_TIMEOUT ? NEXAR_ERR_TIMEOUT : NEXAR_ERR_IO, "PMIx_Fence: %s",
                   err_str(p, st));
  if (val) return 0;
  pmix_proc_t root = all;
  root.rank = 0;
  pmix_value_t *v = NULL;
  st = p->get(&root, NX_LAUNCH_SEED_KEY, NULL, 0, &v);
  if (st != PMIX_SUCCESS || !v)
    return nx_fail(NEXAR_ERR_IO, "PMIx_Get(" NX_LAUNCH_SEED_KEY " of rank 0): %s", err_str(p, st));
  int rc = 0;
  if (v->type != PMIX_STRING || !v->data.string)
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "PMIx_Get(" NX_LAUNCH_SEED_KEY "): not a string");
  else if (strnlen(v->data.string, cap) >= cap)
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "PMIx_Get(" NX_LAUNCH_SEED_KEY "): longer than %zu bytes",
                 cap - 1);
  else
    memcpy(out, v->data.string, strlen(v->data.string) + 1);
  value_free(p, v);
  return rc;
}

static void pmix_close(nx_kvs *kvs) {
  pmixc *p = (pmixc *)kvs;
  if (!p) return;
  /* a process that initialized must finalize, or mpirun counts it as failed */
  p->finalize(NULL, 0);
  /* libpmix keeps threads and handlers registered with the process: never
   * dlclose it */
  free(p);
}

/* NEXAR_PMIX_LIB names another libpmix (a path, or a soname). */
static const char *lib_name(void) {
  const char *l = getenv("NEXAR_PMIX_LIB");
  return l && *l ? l : "libpmix.so.2";
}

int nx_pmix_open(nx_kvs **out) {
  *out = NULL;
  void *lib = dlopen(lib_name(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib)
    return nx_fail(NEXAR_ERR_UNSUPPORTED,
                   "init_from_env (PMIx): PMIX_RANK is set but %.200s cannot be loaded (%.200s): "
                   "install libpmix2 or set NEXAR_PMIX_LIB",
                   lib_name(), dlerror());
  pmixc *p = calloc(1, sizeof *p);
  if (!p) return nx_fail(NEXAR_ERR_NOMEM, "PMIx: no memory");
  p->lib = lib;
#define NX_SYM(f, name)                                                                            \
  if (!(*(void **)&p->f = dlsym(lib, name))) {                                                     \
    free(p);                                                                                       \
    return nx_fail(NEXAR_ERR_UNSUPPORTED, "init_from_env (PMIx): %.200s has no %s", lib_name(),    \
                   name);                                                                          \
  }
  NX_SYM(init, "PMIx_Init");
  NX_SYM(finalize, "PMIx_Finalize");
  NX_SYM(put, "PMIx_Put");
  NX_SYM(commit, "PMIx_Commit");
  NX_SYM(fence, "PMIx_Fence");
  NX_SYM(get, "PMIx_Get");
  NX_SYM(value_destruct, "PMIx_Value_destruct");
  NX_SYM(error_string, "PMIx_Error_string");
#undef NX_SYM
  pmix_status_t st = p->init(&p->me, NULL, 0);
  if (st != PMIX_SUCCESS) {
    int rc = nx_fail(NEXAR_ERR_IO, "init_from_env (PMIx): PMIx_Init: %s", err_str(p, st));
    free(p);
    return rc;
  }
  pmix_proc_t job;
  memset(&job, 0, sizeof job);
  memcpy(job.nspace, p->me.nspace, sizeof job.nspace);
  job.rank = PMIX_RANK_WILDCARD;
  uint32_t world = 0, local = 0;
  int rc = get_u32(p, &job, PMIX_JOB_SIZE, &world);
  if (!rc && get_u32(p, &p->me, PMIX_LOCAL_RANK, &local)) local = 0; /* informative only */
  if (!rc && (world == 0 || p->me.rank >= world))
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "init_from_env (PMIx): rank %u outside a job of %u",
                 p->me.rank, world);
  if (rc) {
    p->finalize(NULL, 0);
    free(p);
    return rc;
  }
  p->base.name = "PMIx";
  p->base.rank = p->me.rank;
  p->base.world = world;
  p->base.local_rank = local;
  p->base.share = pmix_share;
  p->base.close = pmix_close;
  *out = &p->base;
  return 0;
}

int nx_pmix_probe(char *why, size_t cap) {
  void *lib = dlopen(lib_name(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    snprintf(why, cap, "%.200s cannot be loaded: %.200s", lib_name(), dlerror());
    return 0;
  }
  __typeof__(PMIx_Get_version) *ver =
      (__typeof__(PMIx_Get_version) *)dlsym(lib, "PMIx_Get_version");
  snprintf(why, cap, "%.200s loads (%.200s)", lib_name(), ver ? ver() : "version unknown");
  return 1; /* left loaded, as after a real PMIx_Init */
}

#else /* built without PMIx headers */

int nx_pmix_probe(char *why, size_t cap) {
  snprintf(why, cap, "not built: no PMIx headers at build time (install libpmix-dev and rebuild)");
  return 0;
}

int nx_pmix_open(nx_kvs **out) {
  *out = NULL;
  return nx_fail(NEXAR_ERR_UNSUPPORTED,
                 "init_from_env (PMIx): PMIX_RANK is set but this libnexar was built without "
                 "PMIx headers (install libpmix-dev and rebuild)");
}

#endif
