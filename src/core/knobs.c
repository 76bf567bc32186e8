/* Internal knobs: the environment-only extension of the config table (see
 * config.h, nx_knobs). Same rules as the public table: strict parsers, a
 * range for every number, a length limit for every string, errors naming the
 * variable, and printing by nexar-seed --print-config. */
#include "core/config.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum nx_knob_kind {
  NX_KB_U32,   /* uint32_t in [min, max], or "auto" (NX_KNOB_AUTO) */
  NX_KB_BYTES, /* size_t in [min, max], or "auto" (NX_KNOB_AUTO_SIZE) */
  NX_KB_BOOL,  /* int 0/1 */
  NX_KB_ENUM,  /* int, one of a list of names */
  NX_KB_NAME,  /* const char *: the canonical spelling of one of a list of names */
  NX_KB_STR    /* const char * into the environment, at most max bytes */
};

typedef struct nx_knob_name {
  const char *name;
  int value;
} nx_knob_name;

/* The first name of each value is the one printed. */
static const nx_knob_name nx_debug_names[] = {
    {"off", NX_LOG_OFF},   {"error", NX_LOG_ERROR}, {"warn", NX_LOG_WARN},
    {"info", NX_LOG_INFO}, {"debug", NX_LOG_DEBUG}, {"trace", NX_LOG_TRACE},
    {"0", NX_LOG_OFF},     {"1", NX_LOG_DEBUG},     {NULL, 0}};
/* quic.c and reduce.c map these names to what they mean */
static const nx_knob_name nx_cc_names[] = {
    {"bbr2", 0}, {"bbr", 1}, {"cubic", 2}, {"reno", 3}, {NULL, 0}};
static const nx_knob_name nx_impl_names[] = {
    {"auto", 0}, {"scalar", 1}, {"avx2", 2}, {"avx512", 3}, {NULL, 0}};

static const nx_knob_name nx_bind_names[] = {
    {"auto", NX_BIND_AUTO}, {"core", NX_BIND_CORE}, {"none", NX_BIND_NONE}, {NULL, 0}};

#define NX_US_MAX 1000000u /* one second */

/* field, variable, kind, default, min, max (strings: longest length),
 * names (enums). Print order. */
#define NX_KNOB_FIELDS(X)                                                                          \
  X(debug, "NEXAR_DEBUG", NX_KB_ENUM, NX_LOG_OFF, 0, 0, nx_debug_names)                            \
  X(debug_file, "NEXAR_DEBUG_FILE", NX_KB_STR, 0, 0, PATH_MAX - 1, NULL)                           \
  X(dump_on_timeout, "NEXAR_DUMP_ON_TIMEOUT", NX_KB_BOOL, 0, 0, 1, NULL)                           \
  X(lane, "NEXAR_LANE", NX_KB_BOOL, 1, 0, 1, NULL)                                                 \
  X(shm, "NEXAR_SHM", NX_KB_BOOL, 1, 0, 1, NULL)                                                   \
  X(shm_coll, "NEXAR_SHM_COLL", NX_KB_BOOL, 1, 0, 1, NULL)                                         \
  X(yield_us, "NEXAR_YIELD_US", NX_KB_U32, NX_KNOB_AUTO, 0, NX_US_MAX, NULL)                       \
  X(spin_us, "NEXAR_SPIN_US", NX_KB_U32, NX_KNOB_AUTO, 0, NX_US_MAX, NULL)                         \
  X(cpu_bind, "NEXAR_CPU_BIND", NX_KB_ENUM, NX_BIND_AUTO, 0, 0, nx_bind_names)                     \
  X(quic_cc, "NEXAR_QUIC_CC", NX_KB_NAME, 0, 0, 0, nx_cc_names)                                    \
  X(reduce_impl, "NEXAR_REDUCE_IMPL", NX_KB_NAME, 0, 0, 0, nx_impl_names)                          \
  X(bulk_tcp_local, "NEXAR_BULK_TCP_LOCAL", NX_KB_BOOL, 0, 0, 1, NULL)                             \
  X(bulk_min_bytes, "NEXAR_BULK_MIN_BYTES", NX_KB_BYTES, NX_KNOB_AUTO_SIZE, 0, (uint64_t)1 << 40,  \
    NULL)                                                                                          \
  X(device_segment_bytes, "NEXAR_DEVICE_SEGMENT_BYTES", NX_KB_BYTES, (uint64_t)1 << 20, 4096,      \
    (uint64_t)1 << 30, NULL)                                                                       \
  X(device_prefetch, "NEXAR_DEVICE_PREFETCH", NX_KB_U32, 8, 1, 1024, NULL)                         \
  X(device_copy_threads, "NEXAR_DEVICE_COPY_THREADS", NX_KB_U32, 2, 1, 16, NULL)                   \
  X(test_impair, "NEXAR_TEST_IMPAIR", NX_KB_STR, 0, 0, 512, NULL)                                  \
  X(test_agree_exit, "NEXAR_TEST_AGREE_EXIT", NX_KB_STR, 0, 0, 32, NULL)

typedef struct nx_knob_entry {
  const char *env;
  size_t offset;
  enum nx_knob_kind kind;
  int64_t def;
  uint64_t min, max;
  const nx_knob_name *names;
} nx_knob_entry;

static const nx_knob_entry nx_knob_table[] = {
#define NX_ROW(f, env, kind, def, lo, hi, names)                                                   \
  {env, offsetof(nx_knobs, f), kind, (int64_t)(def), (uint64_t)(lo), (uint64_t)(hi), names},
    NX_KNOB_FIELDS(NX_ROW)
#undef NX_ROW
};
#define NX_KNOB_COUNT (sizeof nx_knob_table / sizeof nx_knob_table[0])

#define NX_KB_SIZE(kind)                                                                           \
  ((kind) == NX_KB_U32                           ? sizeof(uint32_t)                                \
   : (kind) == NX_KB_BYTES                       ? sizeof(size_t)                                  \
   : (kind) == NX_KB_STR || (kind) == NX_KB_NAME ? sizeof(const char *)                            \
                                                 : sizeof(int))
#define NX_CHECK(f, env, kind, def, lo, hi, names)                                                 \
  _Static_assert(sizeof(((nx_knobs *)0)->f) == NX_KB_SIZE(kind), #f ": width vs kind");
NX_KNOB_FIELDS(NX_CHECK)
#undef NX_CHECK

static void nx_knob_set(nx_knobs *k, const nx_knob_entry *e, int64_t v, const char *s) {
  char *p = (char *)k + e->offset;
  if (e->kind == NX_KB_U32) {
    uint32_t x = (uint32_t)v;
    memcpy(p, &x, sizeof x);
  } else if (e->kind == NX_KB_BYTES) {
    size_t x = v < 0 ? SIZE_MAX : (size_t)v;
    memcpy(p, &x, sizeof x);
  } else if (e->kind == NX_KB_STR) {
    memcpy(p, &s, sizeof s);
  } else if (e->kind == NX_KB_NAME) { /* v: the value of the name, which is its index */
    const char *name = e->names[v].name;
    memcpy(p, &name, sizeof name);
  } else {
    int x = (int)v;
    memcpy(p, &x, sizeof x);
  }
}

void nx_knobs_defaults(nx_knobs *k) {
  memset(k, 0, sizeof *k);
  for (size_t i = 0; i < NX_KNOB_COUNT; i++)
    nx_knob_set(k, &nx_knob_table[i], nx_knob_table[i].def, NULL);
}

/* "reno, cubic, ..." for an error sentence. */
static void nx_knob_names_list(const nx_knob_name *n, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = '\0';
  for (; n->name && o < cap; n++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", n->name);
}

#define NX_SHOWN 64

static int nx_knob_parse(nx_knobs *k, const nx_knob_entry *e, const char *v) {
  const int bad = NEXAR_ERR_INVALID_ARGUMENT;
  switch (e->kind) {
  case NX_KB_U32:
  case NX_KB_BYTES: {
    if (strcasecmp(v, "auto") == 0) return nx_knob_set(k, e, e->def, NULL), 0;
    uint32_t x32 = 0;
    size_t x = 0;
    int rc = e->kind == NX_KB_U32 ? nx_parse_u32(e->env, v, &x32) : nx_parse_bytes(e->env, v, &x);
    if (rc) return rc;
    if (e->kind == NX_KB_U32) x = x32;
    if (x < e->min || x > e->max)
      return nx_fail(bad, "%s='%.*s': out of range; allowed %" PRIu64 "..%" PRIu64 " or auto",
                     e->env, NX_SHOWN, v, e->min, e->max);
    nx_knob_set(k, e, (int64_t)x, NULL);
    return 0;
  }
  case NX_KB_BOOL: {
    int x = 0;
    int rc = nx_parse_bool(e->env, v, &x);
    if (rc == 0) nx_knob_set(k, e, x, NULL);
    return rc;
  }
  case NX_KB_ENUM:
  case NX_KB_NAME: {
    for (const nx_knob_name *n = e->names; n->name; n++)
      if (strcasecmp(v, n->name) == 0) return nx_knob_set(k, e, n->value, NULL), 0;
    char list[160];
    nx_knob_names_list(e->names, list, sizeof list);
    return nx_fail(bad, "%s='%.*s': expected one of %s", e->env, NX_SHOWN, v, list);
  }
  case NX_KB_STR:
    if (strnlen(v, e->max + 1) > e->max)
      return nx_fail(bad, "%s: longer than %" PRIu64 " characters", e->env, e->max);
    nx_knob_set(k, e, 0, v);
    return 0;
  }
  return bad;
}

int nx_knobs_from_env(nx_knobs *k) {
  nx_knobs tmp;
  nx_knobs_defaults(&tmp);
  nx_knobs_defaults(k);
  for (size_t i = 0; i < NX_KNOB_COUNT; i++) {
    const char *v = getenv(nx_knob_table[i].env);
    if (!v || !*v) continue;
    int rc = nx_knob_parse(&tmp, &nx_knob_table[i], v);
    if (rc) return rc; /* k keeps the defaults */
  }
  *k = tmp;
  return 0;
}

void nx_knobs_print(FILE *f, const nx_knobs *k) {
  if (!f || !k) return;
  for (size_t i = 0; i < NX_KNOB_COUNT; i++) {
    const nx_knob_entry *e = &nx_knob_table[i];
    const char *p = (const char *)k + e->offset;
    switch (e->kind) {
    case NX_KB_U32: {
      uint32_t x;
      memcpy(&x, p, sizeof x);
      if (x == NX_KNOB_AUTO)
        fprintf(f, "%s=auto\n", e->env);
      else
        fprintf(f, "%s=%" PRIu32 "\n", e->env, x);
      break;
    }
    case NX_KB_BYTES: {
      size_t x;
      memcpy(&x, p, sizeof x);
      if (x == NX_KNOB_AUTO_SIZE)
        fprintf(f, "%s=auto\n", e->env);
      else
        fprintf(f, "%s=%zu\n", e->env, x);
      break;
    }
    case NX_KB_BOOL:
    case NX_KB_ENUM: {
      int x;
      memcpy(&x, p, sizeof x);
      const char *name = NULL;
      for (const nx_knob_name *n = e->names; n && n->name && !name; n++)
        if (n->value == x) name = n->name;
      if (name)
        fprintf(f, "%s=%s\n", e->env, name);
      else
        fprintf(f, "%s=%d\n", e->env, x);
      break;
    }
    case NX_KB_STR:
    case NX_KB_NAME: {
      const char *s;
      memcpy(&s, p, sizeof s);
      fprintf(f, "%s=%s\n", e->env, s ? s : "(unset)");
      break;
    }
    }
  }
}
