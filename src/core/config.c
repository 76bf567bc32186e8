/* Configuration: one table of fields, variables and defaults; strict parsers;
 * validation and the resolved internal copy. See config.h for the syntax. */
#include "core/config.h"

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
  NX_K_TOPOLOGY, /* nexar_topology; k_regular:K also sets topology_degree */
  NX_K_STR,      /* const char *, printed as is */
  NX_K_SECRET    /* const char *, printed only as (set)/(unset) */
};

#define NX_KIB ((uint64_t)1 << 10)
#define NX_MIB ((uint64_t)1 << 20)
#define NX_GIB ((uint64_t)1 << 30)
#define NX_4GIB ((uint64_t)SIZE_MAX < 4 * NX_GIB ? (uint64_t)SIZE_MAX : 4 * NX_GIB)

/* field, variable, kind, default. The order is the print order; topology
 * precedes topology_degree. Appending a field to nexar_config: add its row,
 * a NX_CONFIG_SIZE_Vn and an entry in nx_config_sizes. */
#define NX_CONFIG_FIELDS(X)                                                                        \
  X(collective_timeout_ms, "NEXAR_COLLECTIVE_TIMEOUT_MS", NX_K_U32, 30000)                         \
  X(barrier_timeout_ms, "NEXAR_BARRIER_TIMEOUT_MS", NX_K_U32, 30000)                               \
  X(rpc_timeout_ms, "NEXAR_RPC_TIMEOUT_MS", NX_K_U32, 30000)                                       \
  X(connect_timeout_ms, "NEXAR_CONNECT_TIMEOUT_MS", NX_K_U32, 60000)                               \
  X(large_msg_bytes, "NEXAR_LARGE_MSG_BYTES", NX_K_BYTES, 8 * NX_MIB)                              \
  X(pipeline_segment_bytes, "NEXAR_PIPELINE_SEGMENT_BYTES", NX_K_BYTES, 2 * NX_MIB)                \
  X(ring_max_world, "NEXAR_RING_MAX_WORLD", NX_K_U32, 8)                                           \
  X(bulk_transport, "NEXAR_BULK_TRANSPORT", NX_K_BOOL, 1)                                          \
  X(encrypt_bulk, "NEXAR_ENCRYPT_BULK", NX_K_BOOL, 1)                                              \
  X(compressed_allreduce_max_bytes, "NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES", NX_K_BYTES, NX_4GIB)   \
  X(heartbeat_interval_ms, "NEXAR_HEARTBEAT_INTERVAL_MS", NX_K_U32, 1000)                          \
  X(heartbeat_timeout_ms, "NEXAR_HEARTBEAT_TIMEOUT_MS", NX_K_U32, 5000)                            \
  X(recovery_timeout_ms, "NEXAR_RECOVERY_TIMEOUT_MS", NX_K_U32, 30000)                             \
  X(recovery_policy, "NEXAR_RECOVERY_POLICY", NX_K_POLICY, NEXAR_RECOVERY_AUTOMATIC)               \
  X(topology, "NEXAR_TOPOLOGY", NX_K_TOPOLOGY, NEXAR_TOPO_FULL_MESH)                               \
  X(topology_degree, "NEXAR_TOPOLOGY_DEGREE", NX_K_U32, 0)                                         \
  X(elastic_min_world, "NEXAR_ELASTIC_MIN_WORLD", NX_K_U32, 1)                                     \
  X(elastic_max_world, "NEXAR_ELASTIC_MAX_WORLD", NX_K_U32, 0)                                     \
  X(elastic_checkpoint_timeout_ms, "NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS", NX_K_U32, 60000)         \
  X(cluster_token, "NEXAR_CLUSTER_TOKEN", NX_K_SECRET, 0)                                          \
  X(bind_addr, "NEXAR_BIND_ADDR", NX_K_STR, 0)                                                     \
  X(unexpected_budget_bytes, "NEXAR_UNEXPECTED_BUDGET_BYTES", NX_K_BYTES, 256 * NX_MIB)

typedef struct nx_cfg_entry {
  const char *field;
  const char *env;
  size_t offset;
  enum nx_cfg_kind kind;
  uint64_t def;
} nx_cfg_entry;

static const nx_cfg_entry nx_cfg_table[] = {
#define NX_ROW(f, env, kind, def) {#f, env, offsetof(nexar_config, f), kind, (uint64_t)(def)},
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
   : (kind) == NX_K_TOPOLOGY ? sizeof(nexar_topology)                                              \
                             : sizeof(const char *))
#define NX_CHECK(f, env, kind, def)                                                                \
  _Static_assert(sizeof(((nexar_config *)0)->f) == NX_KIND_SIZE(kind), #f ": width vs kind");
NX_CONFIG_FIELDS(NX_CHECK)
#undef NX_CHECK

/* Released layouts. Update when nexar_config grows (see the table comment). */
_Static_assert(sizeof(nexar_config) == NX_CONFIG_SIZE_V2, "nexar_config grew: add a version");
static const size_t nx_config_sizes[] = {NX_CONFIG_SIZE_V1, NX_CONFIG_SIZE_V2};

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
    case NX_K_U32: {
      uint32_t x = 0;
      if ((rc = nx_parse_u32(e->env, v, &x)) == 0) nx_set_num(c, e, x);
      break;
    }
    case NX_K_BYTES: {
      size_t x = 0;
      if ((rc = nx_parse_bytes(e->env, v, &x)) == 0) nx_set_num(c, e, x);
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
    case NX_K_TOPOLOGY:
      rc = nx_parse_topology(e->env, v, &c->topology, &topo_k);
      if (rc == 0 && topo_k) c->topology_degree = topo_k;
      break;
    case NX_K_STR:
    case NX_K_SECRET:
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
  if (c->heartbeat_interval_ms == 0)
    return nx_fail(bad, "config.heartbeat_interval_ms must be non-zero");
  if (c->heartbeat_timeout_ms == 0)
    return nx_fail(bad, "config.heartbeat_timeout_ms must be non-zero");
  if (c->heartbeat_timeout_ms <= c->heartbeat_interval_ms)
    return nx_fail(bad,
                   "config.heartbeat_timeout_ms must exceed heartbeat_interval_ms (%" PRIu32
                   " <= %" PRIu32 ")",
                   c->heartbeat_timeout_ms, c->heartbeat_interval_ms);
  if ((unsigned)c->recovery_policy > NEXAR_RECOVERY_ABORT)
    return nx_fail(bad, "config.recovery_policy %d is not a nexar_recovery_policy",
                   (int)c->recovery_policy);
  if ((unsigned)c->topology > NEXAR_TOPO_HYPERCUBE)
    return nx_fail(bad, "config.topology %d is not a nexar_topology", (int)c->topology);
  if (c->topology == NEXAR_TOPO_K_REGULAR &&
      (c->topology_degree < 2 || c->topology_degree % 2 != 0))
    return nx_fail(bad,
                   "config.topology_degree must be even and >= 2 for NEXAR_TOPO_K_REGULAR "
                   "(got %" PRIu32 ")",
                   c->topology_degree);
  if (c->elastic_min_world < 1) return nx_fail(bad, "config.elastic_min_world must be >= 1");
  if (c->elastic_max_world != 0 && c->elastic_max_world < c->elastic_min_world)
    return nx_fail(bad,
                   "config.elastic_max_world must be 0 (unlimited) or >= elastic_min_world "
                   "(%" PRIu32 " < %" PRIu32 ")",
                   c->elastic_max_world, c->elastic_min_world);
  if (c->pipeline_segment_bytes == 0)
    return nx_fail(bad, "config.pipeline_segment_bytes must be non-zero");
  if (c->large_msg_bytes == 0) return nx_fail(bad, "config.large_msg_bytes must be non-zero");
  if (c->bind_addr) {
    char host[256];
    uint16_t port;
    if (nx_split_hostport(c->bind_addr, host, sizeof host, &port) != 0)
      return nx_fail(bad, "config.bind_addr '%.*s': expected host:port (port 0: ephemeral)",
                     NX_SHOWN, c->bind_addr);
  }
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
