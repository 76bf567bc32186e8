/* Configuration: one table of fields, variables and defaults; strict parsers;
 * validation and the resolved internal copy. See config.h for the syntax. */
#include "core/config.h"
#include "core/addr.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- the table */

enum nx_cfg_kind {
  NX_K_U32,      /* uint32_t, plain decimal */
  NX_K_BYTES,    /* size_t, decimal with optional binary suffix */
  NX_K_BOOL,     /* int, 0/1 */
  NX_K_POLICY,   /* nexar_recovery_policy */
  NX_K_QUORUM,   /* nexar_recovery_quorum */
  NX_K_TOPOLOGY, /* nexar_topology; k_regular:K also sets topology_degree */
  NX_K_STR,      /* const char *, printed as is */
  NX_K_SECRET    /* const char *, printed only as (set)/(unset) */
};

#define NX_KIB ((uint64_t)1 << 10)
#define NX_MIB ((uint64_t)1 << 20)
#define NX_GIB ((uint64_t)1 << 30)
#define NX_STR_MAX 4096 /* the longest string any variable may hold */
#define NX_4GIB ((uint64_t)SIZE_MAX < 4 * NX_GIB ? (uint64_t)SIZE_MAX : 4 * NX_GIB)

#define NX_TIB (NX_GIB << 10)
#define NX_SZ(v) ((uint64_t)SIZE_MAX < (v) ? (uint64_t)SIZE_MAX : (v)) /* 32-bit size_t */
#define NX_DAY_MS 86400000u
#define NX_WORLD 65536u /* NX_BOOT_WORLD_MAX: the most ranks a world may have */

/* Zero: Z0 = only the range [min, max]; Z1 = 0 is also accepted (it means "no
 * limit" for timeouts, "the default" for ring_max_world, "none" for degrees).
 * Strings: max is the longest accepted length in bytes. */
enum { Z0 = 0, Z1 = 1 };

/* field, variable, kind, default, min, max, zero. The order is the print
 * order; topology precedes topology_degree. Every numeric field has a range
 * (README, "Configuration"); a value outside it, from the environment or set
 * in the struct, is INVALID_ARGUMENT naming the variable and the range.
 * Appending a field to nexar_config: add its row, a NX_CONFIG_SIZE_Vn and an
 * entry in nx_config_sizes. */
#define NX_CONFIG_FIELDS(X)                                                                        \
  X(collective_timeout_ms, "NEXAR_COLLECTIVE_TIMEOUT_MS", NX_K_U32, 30000, 1, NX_DAY_MS, Z1)       \
  X(barrier_timeout_ms, "NEXAR_BARRIER_TIMEOUT_MS", NX_K_U32, 30000, 1, NX_DAY_MS, Z1)             \
  X(rpc_timeout_ms, "NEXAR_RPC_TIMEOUT_MS", NX_K_U32, 30000, 1, NX_DAY_MS, Z1)                     \
  X(connect_timeout_ms, "NEXAR_CONNECT_TIMEOUT_MS", NX_K_U32, 60000, 1, NX_DAY_MS, Z1)             \
  X(large_msg_bytes, "NEXAR_LARGE_MSG_BYTES", NX_K_BYTES, 8 * NX_MIB, NX_KIB, NX_SZ(NX_TIB), Z0)   \
  X(pipeline_segment_bytes, "NEXAR_PIPELINE_SEGMENT_BYTES", NX_K_BYTES, 2 * NX_MIB, 16 * NX_KIB,   \
    NX_GIB, Z0)                                                                                    \
  X(ring_max_world, "NEXAR_RING_MAX_WORLD", NX_K_U32, 8, 1, NX_WORLD, Z1)                          \
  X(bulk_transport, "NEXAR_BULK_TRANSPORT", NX_K_BOOL, 1, 0, 1, Z1)                                \
  X(encrypt_bulk, "NEXAR_ENCRYPT_BULK", NX_K_BOOL, 1, 0, 1, Z1)                                    \
  X(compressed_allreduce_max_bytes, "NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES", NX_K_BYTES, NX_4GIB,   \
    1, SIZE_MAX, Z1)                                                                               \
  X(heartbeat_interval_ms, "NEXAR_HEARTBEAT_INTERVAL_MS", NX_K_U32, 1000, 10, 600000, Z0)          \
  X(heartbeat_timeout_ms, "NEXAR_HEARTBEAT_TIMEOUT_MS", NX_K_U32, 5000, 20, 3600000, Z0)           \
  X(recovery_timeout_ms, "NEXAR_RECOVERY_TIMEOUT_MS", NX_K_U32, 30000, 1, NX_DAY_MS, Z1)           \
  X(recovery_policy, "NEXAR_RECOVERY_POLICY", NX_K_POLICY, NEXAR_RECOVERY_AUTOMATIC, 0, 2, Z1)     \
  X(topology, "NEXAR_TOPOLOGY", NX_K_TOPOLOGY, NEXAR_TOPO_FULL_MESH, 0, 2, Z1)                     \
  X(topology_degree, "NEXAR_TOPOLOGY_DEGREE", NX_K_U32, 0, 2, NX_WORLD - 2, Z1)                    \
  X(elastic_min_world, "NEXAR_ELASTIC_MIN_WORLD", NX_K_U32, 1, 1, NX_WORLD, Z0)                    \
  X(elastic_max_world, "NEXAR_ELASTIC_MAX_WORLD", NX_K_U32, 0, 1, NX_WORLD, Z1)                    \
  X(elastic_checkpoint_timeout_ms, "NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS", NX_K_U32, 60000, 1,      \
    NX_DAY_MS, Z1)                                                                                 \
  X(cluster_token, "NEXAR_CLUSTER_TOKEN", NX_K_SECRET, 0, 0, NX_STR_MAX, Z1)                       \
  X(bind_addr, "NEXAR_BIND_ADDR", NX_K_STR, 0, 0, 300, Z1)                                         \
  X(unexpected_budget_bytes, "NEXAR_UNEXPECTED_BUDGET_BYTES", NX_K_BYTES, 256 * NX_MIB, NX_MIB,    \
    NX_SZ(NX_TIB), Z0)                                                                             \
  X(recovery_quorum, "NEXAR_RECOVERY_QUORUM", NX_K_QUORUM, NEXAR_QUORUM_MAJORITY, 0, 1, Z1)

typedef struct nx_cfg_entry {
  const char *field;
  const char *env;
  size_t offset;
  enum nx_cfg_kind kind;
  uint64_t def;
  uint64_t min, max; /* numbers: the range; strings: max = longest length */
  int zero_ok;       /* 0 is accepted besides [min, max] */
} nx_cfg_entry;

static const nx_cfg_entry nx_cfg_table[] = {
#define NX_ROW(f, env, kind, def, lo, hi, z)                                                       \
  {#f, env, offsetof(nexar_config, f), kind, (uint64_t)(def), (uint64_t)(lo), (uint64_t)(hi), z},
    NX_CONFIG_FIELDS(NX_ROW)
#undef NX_ROW
};
#define NX_CFG_COUNT (sizeof nx_cfg_table / sizeof nx_cfg_table[0])

/* Each field's width must match what its kind reads and writes. */
#define NX_KIND_SIZE(kind)                                                                         \
  ((kind) == NX_K_U32        ? sizeof(uint32_t)                                                    \
   : (kind) == NX_K_BYTES    ? sizeof(size_t)                                                      \
   : (kind) == NX_K_BOOL     ? sizeof(int)                                                         \
   : (kind) == NX_K_POLICY   ? sizeof(nexar_recovery_policy)                                       \
   : (kind) == NX_K_QUORUM   ? sizeof(nexar_recovery_quorum)                                       \
   : (kind) == NX_K_TOPOLOGY ? sizeof(nexar_topology)                                              \
                             : sizeof(const char *))
#define NX_CHECK(f, env, kind, def, lo, hi, z)                                                     \
  _Static_assert(sizeof(((nexar_config *)0)->f) == NX_KIND_SIZE(kind), #f ": width vs kind");
NX_CONFIG_FIELDS(NX_CHECK)
#undef NX_CHECK

/* Released layouts. Update when nexar_config grows (see the table comment). */
_Static_assert(sizeof(nexar_config) == NX_CONFIG_SIZE_V3, "nexar_config grew: add a version");
static const size_t nx_config_sizes[] = {NX_CONFIG_SIZE_V1, NX_CONFIG_SIZE_V2, NX_CONFIG_SIZE_V3};

int nx_config_size_known(size_t size) {
  for (size_t i = 0; i < sizeof nx_config_sizes / sizeof nx_config_sizes[0]; i++)
    if (size == nx_config_sizes[i]) return 1;
  return 0;
}

static void nx_set_num(nexar_config *c, const nx_cfg_entry *e, uint64_t v) {
  char *p = (char *)c + e->offset;
  switch (e->kind) {
  case NX_K_U32: {
    uint32_t x = (uint32_t)v;
    memcpy(p, &x, sizeof x);
    break;
  }
  case NX_K_BYTES: {
    size_t x = (size_t)v;
    memcpy(p, &x, sizeof x);
    break;
  }
  case NX_K_BOOL: {
    int x = v != 0;
    memcpy(p, &x, sizeof x);
    break;
  }
  case NX_K_POLICY: {
    nexar_recovery_policy x = (nexar_recovery_policy)v;
    memcpy(p, &x, sizeof x);
    break;
  }
  case NX_K_TOPOLOGY: {
    nexar_topology x = (nexar_topology)v;
    memcpy(p, &x, sizeof x);
    break;
  }
  case NX_K_QUORUM: {
    nexar_recovery_quorum x = (nexar_recovery_quorum)v;
    memcpy(p, &x, sizeof x);
    break;
  }
  case NX_K_STR:
  case NX_K_SECRET: {
    const char *x = NULL;
    memcpy(p, &x, sizeof x);
    break;
  }
  }
}

static void nx_set_str(nexar_config *c, const nx_cfg_entry *e, const char *s) {
  memcpy((char *)c + e->offset, &s, sizeof s);
}

static const char *nx_get_str(const nexar_config *c, const nx_cfg_entry *e) {
  const char *s;
  memcpy(&s, (const char *)c + e->offset, sizeof s);
  return s;
}

static void nx_config_defaults(nexar_config *c) {
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  for (size_t i = 0; i < NX_CFG_COUNT; i++)
    nx_set_num(c, &nx_cfg_table[i], nx_cfg_table[i].def);
}

/* ------------------------------------------------------------- parsers */

#define NX_SHOWN 64 /* characters of a bad value quoted in an error */

/* Decimal digits only (no sign, space or base prefix); 0 on success, with
 * *end after the last digit; -1 if no digit or the value exceeds UINT64_MAX. */
static int nx_digits(const char *s, uint64_t *out, const char **end) {
  if (!s || *s < '0' || *s > '9') return -1;
  char *e;
  errno = 0;
  unsigned long long v = strtoull(s, &e, 10);
  if (errno == ERANGE) return -1;
  *out = (uint64_t)v;
  *end = e;
  return 0;
}

static int nx_parse_max(const char *what, const char *s, uint64_t max, uint64_t *out) {
  uint64_t v = 0;
  const char *end;
  if (nx_digits(s, &v, &end) != 0 || *end != '\0' || v > max)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "%s='%.*s': expected an unsigned decimal integer up to %" PRIu64, what, NX_SHOWN,
                   s ? s : "", max);
  *out = v;
  return 0;
}

int nx_parse_u32(const char *what, const char *s, uint32_t *out) {
  uint64_t v = 0;
  int rc = nx_parse_max(what, s, UINT32_MAX, &v);
  if (rc == 0) *out = (uint32_t)v;
  return rc;
}

int nx_parse_u16(const char *what, const char *s, uint16_t *out) {
  uint64_t v = 0;
  int rc = nx_parse_max(what, s, UINT16_MAX, &v);
  if (rc == 0) *out = (uint16_t)v;
  return rc;
}

int nx_parse_bytes(const char *what, const char *s, size_t *out) {
  static const struct {
    const char *suffix;
    uint64_t mult;
  } units[] = {{"", 1},         {"k", NX_KIB},          {"kib", NX_KIB},
               {"m", NX_MIB},   {"mib", NX_MIB},        {"g", NX_GIB},
               {"gib", NX_GIB}, {"t", NX_GIB * NX_KIB}, {"tib", NX_GIB * NX_KIB}};
  uint64_t v = 0;
  const char *end;
  if (nx_digits(s, &v, &end) == 0) {
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      if (strcasecmp(end, units[i].suffix) != 0) continue;
      if (v > (uint64_t)SIZE_MAX / units[i].mult) break;
      *out = (size_t)(v * units[i].mult);
      return 0;
    }
  }
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "%s='%.*s': expected a byte size up to %zu: digits with an optional K, M, G, "
                 "T, KiB, MiB, GiB or TiB suffix",
                 what, NX_SHOWN, s ? s : "", (size_t)SIZE_MAX);
}

int nx_parse_bool(const char *what, const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; s && i < 4; i++) {
    if (strcasecmp(s, yes[i]) == 0) return *out = 1, 0;
    if (strcasecmp(s, no[i]) == 0) return *out = 0, 0;
  }
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "%s='%.*s': expected a boolean: 0, 1, true, false, yes, no, on or off", what,
                 NX_SHOWN, s ? s : "");
}

/* Case-insensitive, '-' equal to '_'; compares the first n characters of s
 * (all of it when n is SIZE_MAX) with the whole of name. */
static int nx_name_eq(const char *s, size_t n, const char *name) {
  size_t i = 0;
  for (; i < n && s[i] && name[i]; i++) {
    char a = s[i] == '-' ? '_' : s[i], b = name[i];
    if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
    if (a != b) return 0;
  }
  return name[i] == '\0' && (i == n || s[i] == '\0');
}

static const char *const nx_policy_names[] = {"automatic", "manual", "abort"};
static const char *const nx_topo_names[] = {"full_mesh", "k_regular", "hypercube"};
static const char *const nx_quorum_names[] = {"majority", "survivors"};

const char *nx_recovery_policy_name(nexar_recovery_policy p) {
  return (unsigned)p < 3 ? nx_policy_names[p] : "?";
}

const char *nx_topology_name(nexar_topology t) {
  return (unsigned)t < 3 ? nx_topo_names[t] : "?";
}

static int nx_parse_policy(const char *what, const char *s, nexar_recovery_policy *out) {
  for (unsigned i = 0; i < 3; i++)
    if (nx_name_eq(s, SIZE_MAX, nx_policy_names[i])) return *out = (nexar_recovery_policy)i, 0;
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s='%.*s': expected automatic, manual or abort", what,
                 NX_SHOWN, s);
}

static int nx_parse_quorum(const char *what, const char *s, nexar_recovery_quorum *out) {
  for (unsigned i = 0; i < 2; i++)
    if (nx_name_eq(s, SIZE_MAX, nx_quorum_names[i])) return *out = (nexar_recovery_quorum)i, 0;
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s='%.*s': expected majority or survivors", what,
                 NX_SHOWN, s);
}

/* full_mesh | hypercube | k_regular[:K]; *degree = K, or 0 when not given. */
static int nx_parse_topology(const char *what, const char *s, nexar_topology *out,
                             uint32_t *degree) {
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : SIZE_MAX;
  for (unsigned i = 0; i < 3; i++) {
    if (!nx_name_eq(s, n, nx_topo_names[i])) continue;
    if (!colon) return *out = (nexar_topology)i, *degree = 0, 0;
    if (i != NEXAR_TOPO_K_REGULAR) break;
    uint64_t k;
    const char *end;
    if (nx_digits(colon + 1, &k, &end) != 0 || *end || k < 2 || k % 2 || k > UINT32_MAX) break;
    return *out = NEXAR_TOPO_K_REGULAR, *degree = (uint32_t)k, 0;
  }
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "%s='%.*s': expected full_mesh, hypercube or k_regular:K (K even, >= 2)", what,
                 NX_SHOWN, s);
}

/* ---------------------------------------------------------------- ranges */

/* "16384 (16 KiB)" for byte sizes that are whole binary units, else "16385". */
static const char *nx_fmt_num(char *buf, size_t cap, enum nx_cfg_kind kind, uint64_t v) {
  static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
  int u = -1;
  uint64_t x = v;
  while (kind == NX_K_BYTES && x >= 1024 && x % 1024 == 0 && u < 3)
    x /= 1024, u++;
  if (u >= 0 && v != SIZE_MAX)
    snprintf(buf, cap, "%" PRIu64 " (%" PRIu64 " %s)", v, x, unit[u]);
  else
    snprintf(buf, cap, "%" PRIu64, v);
  return buf;
}

/* The allowed range as a phrase: "1..86400000, or 0 (see README)". */
static const char *nx_fmt_range(char *buf, size_t cap, const nx_cfg_entry *e) {
  char lo[48], hi[48];
  snprintf(buf, cap, "%s..%s%s", nx_fmt_num(lo, sizeof lo, e->kind, e->min),
           nx_fmt_num(hi, sizeof hi, e->kind, e->max), e->zero_ok ? ", or 0" : "");
  return buf;
}

static int nx_in_range(const nx_cfg_entry *e, uint64_t v) {
  return (v >= e->min && v <= e->max) || (e->zero_ok && v == 0);
}

/* A value of e's numeric field, whatever its width. */
static uint64_t nx_get_num(const nexar_config *c, const nx_cfg_entry *e) {
  const char *p = (const char *)c + e->offset;
  if (e->kind == NX_K_BYTES) {
    size_t x;
    memcpy(&x, p, sizeof x);
    return x;
  }
  uint32_t x;
  memcpy(&x, p, sizeof x);
  return x;
}

/* --------------------------------------------------------- environment */

static const char *nx_getenv_set(const char *name) {
  const char *v = name ? getenv(name) : NULL;
  return v && *v ? v : NULL;
}

#define NX_ENV_BODY(parse, T)                                                                      \
  const char *v = nx_getenv_set(name);                                                             \
  if (present) *present = 0;                                                                       \
  if (!v) return 0;                                                                                \
  T x = 0;                                                                                         \
  int rc = parse(name, v, &x);                                                                     \
  if (rc != 0) return rc;                                                                          \
  *out = x;                                                                                        \
  if (present) *present = 1;                                                                       \
  return 0

int nx_env_u32(const char *name, uint32_t *out, int *present) {
  NX_ENV_BODY(nx_parse_u32, uint32_t);
}

int nx_env_u16(const char *name, uint16_t *out, int *present) {
  NX_ENV_BODY(nx_parse_u16, uint16_t);
}

int nx_env_bytes(const char *name, size_t *out, int *present) {
  NX_ENV_BODY(nx_parse_bytes, size_t);
}

int nx_env_bool(const char *name, int *out, int *present) {
  NX_ENV_BODY(nx_parse_bool, int);
}

int nx_env_str(const char *name, const char **out, int *present) {
  const char *v = nx_getenv_set(name);
  if (present) *present = v != NULL;
  if (v) *out = v;
  return 0;
}

/* Applies every set NEXAR_* variable of the table to c (a full-size struct).
 * On error c may be partly changed; callers discard it. */
static int nx_apply_env(nexar_config *c) {
  uint32_t topo_k = 0;
  for (size_t i = 0; i < NX_CFG_COUNT; i++) {
    const nx_cfg_entry *e = &nx_cfg_table[i];
    const char *v = nx_getenv_set(e->env);
    if (!v) continue;
    int rc = 0;
    switch (e->kind) {
    case NX_K_U32:
    case NX_K_BYTES: {
      uint32_t x32 = 0;
      size_t x = 0;
      if (e->kind == NX_K_U32)
        rc = nx_parse_u32(e->env, v, &x32), x = x32;
      else
        rc = nx_parse_bytes(e->env, v, &x);
      if (rc == 0 && !nx_in_range(e, x)) {
        char r[160];
        rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s='%.*s': out of range; allowed %s", e->env,
                     NX_SHOWN, v, nx_fmt_range(r, sizeof r, e));
      }
      if (rc == 0) nx_set_num(c, e, x);
      break;
    }
    case NX_K_BOOL: {
      int x = 0;
      if ((rc = nx_parse_bool(e->env, v, &x)) == 0) nx_set_num(c, e, (uint64_t)x);
      break;
    }
    case NX_K_POLICY:
      rc = nx_parse_policy(e->env, v, &c->recovery_policy);
      break;
    case NX_K_QUORUM:
      rc = nx_parse_quorum(e->env, v, &c->recovery_quorum);
      break;
    case NX_K_TOPOLOGY:
      rc = nx_parse_topology(e->env, v, &c->topology, &topo_k);
      if (rc == 0 && topo_k) c->topology_degree = topo_k;
      break;
    case NX_K_STR:
    case NX_K_SECRET:
      if (strnlen(v, e->max + 1) > e->max)
        rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: longer than %" PRIu64 " characters", e->env,
                     e->max);
      else
        nx_set_str(c, e, v);
      break;
    }
    if (rc != 0) return rc;
  }
  /* k_regular:K and NEXAR_TOPOLOGY_DEGREE must not disagree. */
  const char *deg = nx_getenv_set("NEXAR_TOPOLOGY_DEGREE");
  if (topo_k && deg && c->topology_degree != topo_k)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "NEXAR_TOPOLOGY_DEGREE='%.*s' contradicts NEXAR_TOPOLOGY='%.*s'", NX_SHOWN, deg,
                   NX_SHOWN, getenv("NEXAR_TOPOLOGY"));
  return 0;
}

/* ------------------------------------------------------- public default */

int nx_config_fill_default(nexar_config *cfg, size_t nbytes) {
  if (!cfg || nbytes < sizeof(size_t) || nbytes > sizeof(nexar_config))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_config_default: %s",
                   cfg ? "struct_size out of range" : "cfg is NULL");
  nexar_config full;
  nx_config_defaults(&full);
  int rc = nx_apply_env(&full);
  if (rc != 0) nx_config_defaults(&full); /* keep the sentence, drop the partial env */
  full.struct_size = nbytes;
  memcpy(cfg, &full, nbytes);
  return rc;
}

int nexar_config_default_sized(nexar_config *cfg, size_t struct_size) {
  if (!cfg) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_config_default: cfg is NULL");
  if (!nx_config_size_known(struct_size))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "nexar_config_default: struct_size %zu is no nexar_config layout this "
                   "library knows (%zu is current); use the nexar_config_default macro and "
                   "the nexar.h of this library",
                   struct_size, sizeof(nexar_config));
  return nx_config_fill_default(cfg, struct_size);
}

/* ------------------------------------------------------------- resolve */

static int nx_config_validate(const nexar_config *c) {
  const int bad = NEXAR_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < NX_CFG_COUNT; i++) {
    const nx_cfg_entry *e = &nx_cfg_table[i];
    char r[160];
    if (e->kind == NX_K_U32 || e->kind == NX_K_BYTES) {
      uint64_t v = nx_get_num(c, e);
      if (!nx_in_range(e, v))
        return nx_fail(bad, "config.%s = %" PRIu64 " is out of range: allowed %s (%s)", e->field, v,
                       nx_fmt_range(r, sizeof r, e), e->env);
    } else if (e->kind == NX_K_STR || e->kind == NX_K_SECRET) {
      const char *v = nx_get_str(c, e);
      if (v && strnlen(v, e->max + 1) > e->max)
        return nx_fail(bad, "config.%s is longer than %" PRIu64 " characters (%s)", e->field,
                       e->max, e->env);
    }
  }
  if (c->heartbeat_timeout_ms <= c->heartbeat_interval_ms)
    return nx_fail(bad,
                   "config.heartbeat_timeout_ms must exceed heartbeat_interval_ms (%" PRIu32
                   " <= %" PRIu32 ")",
                   c->heartbeat_timeout_ms, c->heartbeat_interval_ms);
  if ((unsigned)c->recovery_policy > NEXAR_RECOVERY_ABORT)
    return nx_fail(bad, "config.recovery_policy %d is not a nexar_recovery_policy",
                   (int)c->recovery_policy);
  if ((unsigned)c->recovery_quorum > NEXAR_QUORUM_SURVIVORS)
    return nx_fail(bad, "config.recovery_quorum %d is not a nexar_recovery_quorum",
                   (int)c->recovery_quorum);
  if ((unsigned)c->topology > NEXAR_TOPO_HYPERCUBE)
    return nx_fail(bad, "config.topology %d is not a nexar_topology", (int)c->topology);
  if (c->topology == NEXAR_TOPO_K_REGULAR &&
      (c->topology_degree < 2 || c->topology_degree % 2 != 0))
    return nx_fail(bad,
                   "config.topology_degree must be even and >= 2 for NEXAR_TOPO_K_REGULAR "
                   "(got %" PRIu32 ")",
                   c->topology_degree);
  if (c->elastic_max_world != 0 && c->elastic_max_world < c->elastic_min_world)
    return nx_fail(bad,
                   "config.elastic_max_world must be 0 (unlimited) or >= elastic_min_world "
                   "(%" PRIu32 " < %" PRIu32 ")",
                   c->elastic_max_world, c->elastic_min_world);
  if (c->bind_addr) {
    char host[256];
    uint16_t port;
    int rc =
        nx_addr_split(c->bind_addr, "config.bind_addr (NEXAR_BIND_ADDR)", host, sizeof host, &port);
    if (rc) return rc; /* the sentence names the field, the input and what is wrong */
  }
  return 0;
}

/* Settings that are valid but not implemented yet: refused, never silently
 * replaced (a full mesh, host memory). */
static int nx_config_supported(const nexar_config *c) {
  const nexar_device_adapter *a = c->adapter;
  if (a && (a->struct_size < offsetof(nexar_device_adapter, to_host_async) || !a->to_host ||
            !a->from_host))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "config.adapter: struct_size %zu (at least %zu) with to_host and from_host "
                   "set is required",
                   a->struct_size, offsetof(nexar_device_adapter, to_host_async));
  return 0;
}

int nx_config_resolve(const nexar_config *in, nexar_config *out) {
  if (!out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "config: no output");
  nexar_config tmp;
  nx_config_defaults(&tmp);
  int rc = 0;
  if (in && !nx_config_size_known(in->struct_size)) {
    rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "config.struct_size not set by nexar_config_default (%zu; expected %zu)",
                 in->struct_size, sizeof(nexar_config));
  } else if (!in || in->struct_size < sizeof tmp) {
    rc = nx_apply_env(&tmp); /* the fields the caller has not set */
  }
  if (rc == 0 && in) memcpy(&tmp, in, in->struct_size);
  tmp.struct_size = sizeof tmp;
  tmp.bulk_transport = tmp.bulk_transport != 0;
  tmp.encrypt_bulk = tmp.encrypt_bulk != 0;
  if (tmp.cluster_token && !*tmp.cluster_token) tmp.cluster_token = NULL;
  if (tmp.bind_addr && !*tmp.bind_addr) tmp.bind_addr = NULL;
  if (rc == 0) rc = nx_config_validate(&tmp);
  if (rc == 0) rc = nx_config_supported(&tmp);
  nx_knobs knobs;
  if (rc == 0) rc = nx_knobs_from_env(&knobs); /* environment-only knobs: checked here too */
  memset(out, 0, sizeof *out);
  if (rc != 0) return rc;
  const char *tok = tmp.cluster_token, *bind = tmp.bind_addr;
  tmp.cluster_token = tmp.bind_addr = NULL;
  if ((tok && !(tmp.cluster_token = nx_strdup(tok))) ||
      (bind && !(tmp.bind_addr = nx_strdup(bind)))) {
    nx_config_release(&tmp);
    return nx_fail(NEXAR_ERR_NOMEM, "config: out of memory copying strings");
  }
  *out = tmp;
  return 0;
}

void nx_config_release(nexar_config *c) {
  if (!c) return;
  free((char *)c->cluster_token);
  free((char *)c->bind_addr);
  c->cluster_token = c->bind_addr = NULL;
}

/* --------------------------------------------------------------- print */

void nx_config_print(FILE *f, const nexar_config *c) {
  if (!f || !c) return;
  for (size_t i = 0; i < NX_CFG_COUNT; i++) {
    const nx_cfg_entry *e = &nx_cfg_table[i];
    const char *p = (const char *)c + e->offset;
    switch (e->kind) {
    case NX_K_U32: {
      uint32_t x = 0;
      memcpy(&x, p, sizeof x);
      fprintf(f, "%s=%" PRIu32 "\n", e->env, x);
      break;
    }
    case NX_K_BYTES: {
      size_t x = 0;
      memcpy(&x, p, sizeof x);
      fprintf(f, "%s=%zu\n", e->env, x);
      break;
    }
    case NX_K_BOOL: {
      int x = 0;
      memcpy(&x, p, sizeof x);
      fprintf(f, "%s=%d\n", e->env, x != 0);
      break;
    }
    case NX_K_POLICY:
      fprintf(f, "%s=%s\n", e->env, nx_recovery_policy_name(c->recovery_policy));
      break;
    case NX_K_QUORUM:
      fprintf(f, "%s=%s\n", e->env,
              (unsigned)c->recovery_quorum < 2 ? nx_quorum_names[c->recovery_quorum] : "?");
      break;
    case NX_K_TOPOLOGY:
      if (c->topology == NEXAR_TOPO_K_REGULAR && c->topology_degree)
        fprintf(f, "%s=k_regular:%" PRIu32 "\n", e->env, c->topology_degree);
      else
        fprintf(f, "%s=%s\n", e->env, nx_topology_name(c->topology));
      break;
    case NX_K_STR: {
      const char *s = nx_get_str(c, e);
      fprintf(f, "%s=%s\n", e->env, s ? s : "(unset)");
      break;
    }
    case NX_K_SECRET:
      fprintf(f, "%s=%s\n", e->env, nx_get_str(c, e) ? "(set)" : "(unset)");
      break;
    }
  }
  fprintf(f, "NEXAR_ADAPTER=%s\n", c->adapter ? "(set)" : "(none)");
}

void nx_config_print_all(FILE *f, const nexar_config *c) {
  if (!f || !c) return;
  nx_config_print(f, c);
  nx_knobs k;
  fprintf(f, "# environment-only knobs\n");
  if (nx_knobs_from_env(&k) != 0) fprintf(f, "# %s\n", nexar_last_error());
  nx_knobs_print(f, &k);
}
