/* Unit test of src/core/config: defaults, every NEXAR_* variable, suffixes,
 * malformed values, validation, struct versions, printing, env helpers. */
#include "core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond,      \
              nexar_last_error());                                                                 \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const char *const all_vars[] = {"NEXAR_COLLECTIVE_TIMEOUT_MS",
                                       "NEXAR_BARRIER_TIMEOUT_MS",
                                       "NEXAR_RPC_TIMEOUT_MS",
                                       "NEXAR_CONNECT_TIMEOUT_MS",
                                       "NEXAR_LARGE_MSG_BYTES",
                                       "NEXAR_PIPELINE_SEGMENT_BYTES",
                                       "NEXAR_RING_MAX_WORLD",
                                       "NEXAR_BULK_TRANSPORT",
                                       "NEXAR_ENCRYPT_BULK",
                                       "NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES",
                                       "NEXAR_HEARTBEAT_INTERVAL_MS",
                                       "NEXAR_HEARTBEAT_TIMEOUT_MS",
                                       "NEXAR_RECOVERY_TIMEOUT_MS",
                                       "NEXAR_RECOVERY_POLICY",
                                       "NEXAR_TOPOLOGY",
                                       "NEXAR_TOPOLOGY_DEGREE",
                                       "NEXAR_ELASTIC_MIN_WORLD",
                                       "NEXAR_ELASTIC_MAX_WORLD",
                                       "NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS",
                                       "NEXAR_CLUSTER_TOKEN",
                                       "NEXAR_BIND_ADDR"};
#define NX_DAY_MS_TEST 86400000u
#define NVARS (sizeof all_vars / sizeof all_vars[0])

static void clear_env(void) {
  for (size_t i = 0; i < NVARS; i++)
    unsetenv(all_vars[i]);
}

static int err_has(const char *needle) {
  return strstr(nexar_last_error(), needle) != NULL;
}

/* Field-by-field comparison (padding ignored); reports what differs. */
static int cfg_same(const nexar_config *a, const nexar_config *b, const char *ctx) {
  int same = 1;
#define CMP(f)                                                                                     \
  do {                                                                                             \
    if (a->f != b->f) {                                                                            \
      fprintf(stderr, "  %s: field " #f " differs\n", ctx);                                        \
      same = 0;                                                                                    \
    }                                                                                              \
  } while (0)
  CMP(struct_size);
  CMP(collective_timeout_ms);
  CMP(barrier_timeout_ms);
  CMP(rpc_timeout_ms);
  CMP(connect_timeout_ms);
  CMP(large_msg_bytes);
  CMP(pipeline_segment_bytes);
  CMP(ring_max_world);
  CMP(bulk_transport);
  CMP(encrypt_bulk);
  CMP(compressed_allreduce_max_bytes);
  CMP(heartbeat_interval_ms);
  CMP(heartbeat_timeout_ms);
  CMP(recovery_timeout_ms);
  CMP(recovery_policy);
  CMP(topology);
  CMP(topology_degree);
  CMP(elastic_min_world);
  CMP(elastic_max_world);
  CMP(elastic_checkpoint_timeout_ms);
  CMP(cluster_token);
  CMP(bind_addr);
  CMP(adapter);
#undef CMP
  return same;
}

static nexar_config base; /* defaults with a clean environment */

static void test_defaults(void) {
  clear_env();
  nexar_config c;
  memset(&c, 0xA5, sizeof c);
  CHECK(nexar_config_default(&c) == 0);
  CHECK(c.struct_size == sizeof(nexar_config));
  CHECK(c.collective_timeout_ms == 30000);
  CHECK(c.barrier_timeout_ms == 30000);
  CHECK(c.rpc_timeout_ms == 30000);
  CHECK(c.connect_timeout_ms == 60000);
  CHECK(c.large_msg_bytes == 8u << 20);
  CHECK(c.pipeline_segment_bytes == 2u << 20);
  CHECK(c.ring_max_world == 8);
  CHECK(c.bulk_transport == 1);
  CHECK(c.encrypt_bulk == 1);
  CHECK(c.compressed_allreduce_max_bytes == (size_t)4 << 30);
  CHECK(c.heartbeat_interval_ms == 1000);
  CHECK(c.heartbeat_timeout_ms == 5000);
  CHECK(c.recovery_timeout_ms == 30000);
  CHECK(c.recovery_policy == NEXAR_RECOVERY_AUTOMATIC);
  CHECK(c.topology == NEXAR_TOPO_FULL_MESH);
  CHECK(c.topology_degree == 0);
  CHECK(c.elastic_min_world == 1);
  CHECK(c.elastic_max_world == 0);
  CHECK(c.elastic_checkpoint_timeout_ms == 60000);
  CHECK(c.cluster_token == NULL);
  CHECK(c.bind_addr == NULL);
  CHECK(c.adapter == NULL);
  CHECK(c.unexpected_budget_bytes == (size_t)256 << 20);
  CHECK(c.recovery_quorum == NEXAR_QUORUM_MAJORITY);
  CHECK(NX_CONFIG_SIZE_V3 == sizeof(nexar_config));
  CHECK(nx_config_size_known(NX_CONFIG_SIZE_V2));
  CHECK(nx_config_size_known(NX_CONFIG_SIZE_V1));
  CHECK(nx_config_size_known(sizeof(nexar_config)));
  memcpy(&base, &c, sizeof c);
}

static void test_null_and_sizes(void) {
  clear_env();
  CHECK(nexar_config_default(NULL) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(err_has("cfg is NULL"));
  CHECK(nexar_config_default_sized(NULL, sizeof(nexar_config)) == NEXAR_ERR_INVALID_ARGUMENT);
  const size_t bad[] = {0, 7, NX_CONFIG_SIZE_V1 - 8, sizeof(nexar_config) - 1,
                        sizeof(nexar_config) + 8};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned char buf[sizeof(nexar_config) + 64], ref[sizeof buf];
    memset(buf, 0x5A, sizeof buf);
    memcpy(ref, buf, sizeof buf);
    CHECK(nexar_config_default_sized((nexar_config *)(void *)buf, bad[i]) ==
          NEXAR_ERR_INVALID_ARGUMENT);
    CHECK(err_has("struct_size"));
    CHECK(memcmp(buf, ref, sizeof buf) == 0); /* nothing written */
  }
}

/* A caller built against an older, smaller struct: nothing past its size. */
static void test_partial_fill(void) {
  clear_env();
  setenv("NEXAR_RPC_TIMEOUT_MS", "7", 1);
  setenv("NEXAR_BULK_TRANSPORT", "0", 1); /* past the boundary: must not land */
  union {
    nexar_config c;
    unsigned char b[sizeof(nexar_config) + 32];
  } u;
  const size_t n = offsetof(nexar_config, ring_max_world);
  memset(&u, 0xA5, sizeof u);
  CHECK(nx_config_fill_default(&u.c, n) == 0);
  CHECK(u.c.struct_size == n);
  CHECK(u.c.collective_timeout_ms == 30000);
  CHECK(u.c.rpc_timeout_ms == 7);
  CHECK(u.c.pipeline_segment_bytes == 2u << 20);
  int untouched = 1;
  for (size_t i = n; i < sizeof u.b; i++)
    untouched &= u.b[i] == 0xA5;
  CHECK(untouched);

  /* Full size in a bigger buffer: the bytes after the struct stay. */
  memset(&u, 0xA5, sizeof u);
  CHECK(nexar_config_default(&u.c) == 0);
  CHECK(u.c.rpc_timeout_ms == 7 && u.c.bulk_transport == 0);
  untouched = 1;
  for (size_t i = sizeof(nexar_config); i < sizeof u.b; i++)
    untouched &= u.b[i] == 0xA5;
  CHECK(untouched);

  CHECK(nx_config_fill_default(&u.c, 3) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(nx_config_fill_default(&u.c, sizeof(nexar_config) + 1) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(nx_config_fill_default(NULL, sizeof(nexar_config)) == NEXAR_ERR_INVALID_ARGUMENT);
  clear_env();
}

/* Sets one variable, expects base with one field changed. */
#define VAR_CASE(var, val, field, expected)                                                        \
  do {                                                                                             \
    clear_env();                                                                                   \
    setenv(var, val, 1);                                                                           \
    nexar_config got, want;                                                                        \
    memcpy(&want, &base, sizeof want);                                                             \
    want.field = (expected);                                                                       \
    int rc_ = nexar_config_default(&got);                                                          \
    CHECK(rc_ == 0);                                                                               \
    if (rc_ == 0 && !cfg_same(&got, &want, var "=" val)) {                                         \
      fprintf(stderr, "%s:%d: %s=%s not applied as expected\n", __FILE__, __LINE__, var, val);     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void test_every_variable(void) {
  VAR_CASE("NEXAR_COLLECTIVE_TIMEOUT_MS", "1234", collective_timeout_ms, 1234);
  VAR_CASE("NEXAR_COLLECTIVE_TIMEOUT_MS", "0", collective_timeout_ms, 0);
  VAR_CASE("NEXAR_BARRIER_TIMEOUT_MS", "2345", barrier_timeout_ms, 2345);
  VAR_CASE("NEXAR_RPC_TIMEOUT_MS", "3456", rpc_timeout_ms, 3456);
  VAR_CASE("NEXAR_CONNECT_TIMEOUT_MS", "86400000", connect_timeout_ms, 86400000u);
  VAR_CASE("NEXAR_LARGE_MSG_BYTES", "16M", large_msg_bytes, 16u << 20);
  VAR_CASE("NEXAR_PIPELINE_SEGMENT_BYTES", "512KiB", pipeline_segment_bytes, 512u << 10);
  VAR_CASE("NEXAR_RING_MAX_WORLD", "16", ring_max_world, 16);
  VAR_CASE("NEXAR_BULK_TRANSPORT", "off", bulk_transport, 0);
  VAR_CASE("NEXAR_ENCRYPT_BULK", "false", encrypt_bulk, 0);
  VAR_CASE("NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES", "0", compressed_allreduce_max_bytes, 0);
  VAR_CASE("NEXAR_HEARTBEAT_INTERVAL_MS", "250", heartbeat_interval_ms, 250);
  VAR_CASE("NEXAR_HEARTBEAT_TIMEOUT_MS", "9000", heartbeat_timeout_ms, 9000);
  VAR_CASE("NEXAR_RECOVERY_TIMEOUT_MS", "100", recovery_timeout_ms, 100);
  VAR_CASE("NEXAR_RECOVERY_POLICY", "manual", recovery_policy, NEXAR_RECOVERY_MANUAL);
  VAR_CASE("NEXAR_RECOVERY_POLICY", "ABORT", recovery_policy, NEXAR_RECOVERY_ABORT);
  VAR_CASE("NEXAR_RECOVERY_POLICY", "Automatic", recovery_policy, NEXAR_RECOVERY_AUTOMATIC);
  VAR_CASE("NEXAR_TOPOLOGY", "hypercube", topology, NEXAR_TOPO_HYPERCUBE);
  VAR_CASE("NEXAR_TOPOLOGY", "Full-Mesh", topology, NEXAR_TOPO_FULL_MESH);
  VAR_CASE("NEXAR_TOPOLOGY", "k_regular", topology, NEXAR_TOPO_K_REGULAR);
  VAR_CASE("NEXAR_TOPOLOGY_DEGREE", "6", topology_degree, 6);
  VAR_CASE("NEXAR_ELASTIC_MIN_WORLD", "3", elastic_min_world, 3);
  VAR_CASE("NEXAR_ELASTIC_MAX_WORLD", "64", elastic_max_world, 64);
  VAR_CASE("NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS", "5", elastic_checkpoint_timeout_ms, 5);
  VAR_CASE("NEXAR_CLUSTER_TOKEN", "s3cret", cluster_token, getenv("NEXAR_CLUSTER_TOKEN"));
  VAR_CASE("NEXAR_BIND_ADDR", "10.0.0.1:0", bind_addr, getenv("NEXAR_BIND_ADDR"));

  /* k_regular:K sets two fields; NEXAR_TOPOLOGY_DEGREE may agree. */
  clear_env();
  setenv("NEXAR_TOPOLOGY", "k_regular:4", 1);
  nexar_config c;
  CHECK(nexar_config_default(&c) == 0);
  CHECK(c.topology == NEXAR_TOPO_K_REGULAR && c.topology_degree == 4);
  setenv("NEXAR_TOPOLOGY_DEGREE", "4", 1);
  CHECK(nexar_config_default(&c) == 0 && c.topology_degree == 4);
  setenv("NEXAR_TOPOLOGY", "K-Regular", 1);
  setenv("NEXAR_TOPOLOGY_DEGREE", "8", 1);
  CHECK(nexar_config_default(&c) == 0);
  CHECK(c.topology == NEXAR_TOPO_K_REGULAR && c.topology_degree == 8);
  setenv("NEXAR_TOPOLOGY", "k_regular:4", 1);
  CHECK(nexar_config_default(&c) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(err_has("NEXAR_TOPOLOGY_DEGREE='8'") && err_has("NEXAR_TOPOLOGY='k_regular:4'"));

  /* All at once, and the token points into the environment. */
  clear_env();
  setenv("NEXAR_CLUSTER_TOKEN", "tok", 1);
  setenv("NEXAR_RING_MAX_WORLD", "2", 1);
  setenv("NEXAR_ENCRYPT_BULK", "no", 1);
  CHECK(nexar_config_default(&c) == 0);
  CHECK(c.cluster_token == getenv("NEXAR_CLUSTER_TOKEN"));
  CHECK(c.ring_max_world == 2 && c.encrypt_bulk == 0);
  clear_env();
}

static void bytes_case(const char *val, size_t want) {
  clear_env();
  /* the one byte-size knob whose range is all of size_t */
  setenv("NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES", val, 1);
  nexar_config c;
  int rc = nexar_config_default(&c);
  CHECK(rc == 0);
  if (rc == 0 && c.compressed_allreduce_max_bytes != want) {
    fprintf(stderr, "  NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES=%s gave %zu, want %zu\n", val,
            c.compressed_allreduce_max_bytes, want);
    failures++;
  }
}

static void test_suffixes(void) {
  bytes_case("123", 123);
  bytes_case("0", 0);
  bytes_case("1K", 1024);
  bytes_case("1k", 1024);
  bytes_case("2KiB", 2048);
  bytes_case("2kib", 2048);
  bytes_case("3M", 3u << 20);
  bytes_case("3MiB", 3u << 20);
  bytes_case("5G", (size_t)5 << 30);
  bytes_case("5GiB", (size_t)5 << 30);
  bytes_case("2T", (size_t)2 << 40);
  bytes_case("2TiB", (size_t)2 << 40);
  bytes_case("4294967296", (size_t)1 << 32);
  bytes_case("18446744073709551615", SIZE_MAX);
  bytes_case("16777215T", (size_t)16777215 << 40);
  clear_env();
}

static void test_booleans(void) {
  const char *t[] = {"1", "true", "yes", "on", "TRUE", "Yes", "On"};
  const char *f[] = {"0", "false", "no", "off", "FALSE", "No", "OFF"};
  nexar_config c;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    clear_env();
    setenv("NEXAR_BULK_TRANSPORT", f[i], 1);
    setenv("NEXAR_ENCRYPT_BULK", t[i], 1);
    CHECK(nexar_config_default(&c) == 0);
    CHECK(c.bulk_transport == 0 && c.encrypt_bulk == 1);
  }
  clear_env();
}

/* A malformed variable: INVALID_ARGUMENT naming it and its value; cfg holds
 * the plain defaults. */
static void bad_case(const char *var, const char *val) {
  clear_env();
  setenv(var, val, 1);
  nexar_config c;
  memset(&c, 0x5A, sizeof c);
  int rc = nexar_config_default(&c);
  char want[256];
  snprintf(want, sizeof want, "%s='%s'", var, val);
  if (rc != NEXAR_ERR_INVALID_ARGUMENT || !err_has(want)) {
    fprintf(stderr, "  %s=%s: rc %d, error '%s'\n", var, val, rc, nexar_last_error());
    failures++;
  }
  CHECK(cfg_same(&c, &base, want));
}

static void test_malformed(void) {
  const char *ms[] = {"abc", "-1",         " 5",  "5 ",  "+5",  "0x10",
                      "1e3", "4294967296", "5ms", "1.5", "1,5", "99999999999999999999999",
                      "1K"};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    bad_case("NEXAR_RPC_TIMEOUT_MS", ms[i]);
  bad_case("NEXAR_COLLECTIVE_TIMEOUT_MS", "x");
  bad_case("NEXAR_BARRIER_TIMEOUT_MS", "x");
  bad_case("NEXAR_CONNECT_TIMEOUT_MS", "x");
  bad_case("NEXAR_RING_MAX_WORLD", "-8");
  bad_case("NEXAR_HEARTBEAT_INTERVAL_MS", "1s");
  bad_case("NEXAR_HEARTBEAT_TIMEOUT_MS", "x");
  bad_case("NEXAR_RECOVERY_TIMEOUT_MS", "x");
  bad_case("NEXAR_TOPOLOGY_DEGREE", "two");
  bad_case("NEXAR_ELASTIC_MIN_WORLD", "x");
  bad_case("NEXAR_ELASTIC_MAX_WORLD", "x");
  bad_case("NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS", "x");
  const char *bytes[] = {
      "8MB",       "1.5M",         "M",    "-8M", "8 M", "8Mi", "8KB", " 8", "18446744073709551616",
      "16777216T", "17179869184G", "0x100"};
  for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
    bad_case("NEXAR_LARGE_MSG_BYTES", bytes[i]);
  bad_case("NEXAR_PIPELINE_SEGMENT_BYTES", "x");
  bad_case("NEXAR_COMPRESSED_ALLREDUCE_MAX_BYTES", "-1");
  const char *bools[] = {"2", "tru", "yess", "-1", "y", "enabled"};
  for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
    bad_case("NEXAR_BULK_TRANSPORT", bools[i]);
  bad_case("NEXAR_ENCRYPT_BULK", "maybe");
  bad_case("NEXAR_RECOVERY_POLICY", "restart");
  bad_case("NEXAR_RECOVERY_POLICY", "automatic:1");
  const char *topo[] = {"ring",         "k_regular:3", "k_regular:0",  "k_regular:",
                        "k_regular:4x", "full_mesh:4", "hypercube:2",  "k_regular:-2",
                        "k_regularx",   "k_regular:1", "k_regular: 4", "k_regular:99999999998"};
  for (size_t i = 0; i < sizeof topo / sizeof topo[0]; i++)
    bad_case("NEXAR_TOPOLOGY", topo[i]);

  /* A long value is quoted truncated, never overflowing the sentence. */
  char longv[2000];
  memset(longv, '9', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  clear_env();
  setenv("NEXAR_RING_MAX_WORLD", longv, 1);
  nexar_config c;
  CHECK(nexar_config_default(&c) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(err_has("NEXAR_RING_MAX_WORLD='9999"));
  clear_env();
}

static void test_empty_is_unset(void) {
  clear_env();
  for (size_t i = 0; i < NVARS; i++)
    setenv(all_vars[i], "", 1);
  nexar_config c;
  CHECK(nexar_config_default(&c) == 0);
  CHECK(cfg_same(&c, &base, "all variables empty"));
  clear_env();
}

/* in: a config that fails validation with a sentence containing needle. */
static void invalid_case(const nexar_config *in, const char *needle) {
  nexar_config out;
  memset(&out, 0x5A, sizeof out);
  int rc = nx_config_resolve(in, &out);
  if (rc != NEXAR_ERR_INVALID_ARGUMENT || !err_has(needle)) {
    fprintf(stderr, "  expected '%s': rc %d, error '%s'\n", needle, rc, nexar_last_error());
    failures++;
  }
  nexar_config zero;
  memset(&zero, 0, sizeof zero);
  CHECK(memcmp(&out, &zero, sizeof out) == 0);
  nx_config_release(&out);
}

static void test_resolve_validation(void) {
  clear_env();
  nexar_config c;
  CHECK(nexar_config_default(&c) == 0);
#define MUT(stmt, needle)                                                                          \
  do {                                                                                             \
    nexar_config m_;                                                                               \
    memcpy(&m_, &c, sizeof m_);                                                                    \
    stmt;                                                                                          \
    invalid_case(&m_, needle);                                                                     \
  } while (0)
  MUT(m_.struct_size = 0, "config.struct_size not set by nexar_config_default");
  MUT(m_.struct_size = 12345, "config.struct_size not set by nexar_config_default");
  MUT(m_.struct_size = sizeof(nexar_config) + 8, "config.struct_size");
  MUT(m_.heartbeat_interval_ms = 0, "config.heartbeat_interval_ms");
  MUT(m_.heartbeat_timeout_ms = 0, "config.heartbeat_timeout_ms");
  MUT(m_.heartbeat_timeout_ms = 1000, "config.heartbeat_timeout_ms must exceed "
                                      "heartbeat_interval_ms");
  MUT((m_.heartbeat_interval_ms = 6000, m_.heartbeat_timeout_ms = 5000),
      "config.heartbeat_timeout_ms must exceed heartbeat_interval_ms");
  MUT(m_.recovery_policy = (nexar_recovery_policy)3, "config.recovery_policy");
  MUT(m_.recovery_policy = (nexar_recovery_policy)-1, "config.recovery_policy");
  MUT(m_.topology = (nexar_topology)3, "config.topology");
  MUT(m_.topology = (nexar_topology)-1, "config.topology");
  MUT(m_.topology = NEXAR_TOPO_K_REGULAR, "config.topology_degree");
  MUT((m_.topology = NEXAR_TOPO_K_REGULAR, m_.topology_degree = 3), "config.topology_degree");
  MUT((m_.topology = NEXAR_TOPO_K_REGULAR, m_.topology_degree = 1), "config.topology_degree");
  MUT(m_.elastic_min_world = 0, "config.elastic_min_world");
  MUT((m_.elastic_min_world = 4, m_.elastic_max_world = 3), "config.elastic_max_world");
  MUT(m_.pipeline_segment_bytes = 0, "config.pipeline_segment_bytes");
  MUT(m_.large_msg_bytes = 0, "config.large_msg_bytes");
  MUT(m_.bind_addr = "nohost", "config.bind_addr");
  MUT(m_.bind_addr = "host:99999", "config.bind_addr");
#undef MUT
  CHECK(nx_config_resolve(&c, NULL) == NEXAR_ERR_INVALID_ARGUMENT);

  /* NULL in with a malformed environment: the variable's error, out zeroed. */
  setenv("NEXAR_HEARTBEAT_TIMEOUT_MS", "soon", 1);
  invalid_case(NULL, "NEXAR_HEARTBEAT_TIMEOUT_MS='soon'");
  /* Well-formed variables that fail validation together. */
  setenv("NEXAR_HEARTBEAT_TIMEOUT_MS", "500", 1);
  invalid_case(NULL, "config.heartbeat_timeout_ms must exceed heartbeat_interval_ms");
  /* A full-size caller config already carries the environment: not reread. */
  setenv("NEXAR_HEARTBEAT_TIMEOUT_MS", "soon", 1);
  nexar_config out;
  CHECK(nx_config_resolve(&c, &out) == 0);
  CHECK(out.heartbeat_timeout_ms == 5000);
  nx_config_release(&out);
  clear_env();
}

static void test_resolve_ok(void) {
  clear_env();
  nexar_config out, out2;
  /* NULL: defaults plus environment. */
  CHECK(nx_config_resolve(NULL, &out) == 0);
  CHECK(cfg_same(&out, &base, "resolve(NULL)"));
  nx_config_release(&out);
  setenv("NEXAR_CLUSTER_TOKEN", "envtok", 1);
  CHECK(nx_config_resolve(NULL, &out) == 0);
  CHECK(out.cluster_token && strcmp(out.cluster_token, "envtok") == 0);
  CHECK(out.cluster_token != getenv("NEXAR_CLUSTER_TOKEN")); /* owned copy */
  nx_config_release(&out);
  clear_env();

  /* Strings are copied: the caller's buffers may die after the call. */
  nexar_config c;
  CHECK(nexar_config_default(&c) == 0);
  char tok[] = "secret-token", bind[] = "[::1]:5000";
  c.cluster_token = tok;
  c.bind_addr = bind;
  c.bulk_transport = 7;
  c.encrypt_bulk = -3;
  c.heartbeat_interval_ms = 10;
  c.heartbeat_timeout_ms = 20;
  c.elastic_min_world = 2;
  c.elastic_max_world = 2;
  CHECK(nx_config_resolve(&c, &out) == 0);
  memset(tok, 'x', sizeof tok - 1);
  memset(bind, 'x', sizeof bind - 1);
  CHECK(out.cluster_token && strcmp(out.cluster_token, "secret-token") == 0);
  CHECK(out.bind_addr && strcmp(out.bind_addr, "[::1]:5000") == 0);
  CHECK(out.bulk_transport == 1 && out.encrypt_bulk == 1);
  CHECK(out.heartbeat_interval_ms == 10 && out.heartbeat_timeout_ms == 20);
  CHECK(out.elastic_min_world == 2 && out.elastic_max_world == 2);
  CHECK(out.struct_size == sizeof(nexar_config));

  /* Inheriting: resolving a resolved copy gives an independent copy. */
  CHECK(nx_config_resolve(&out, &out2) == 0);
  CHECK(out2.cluster_token != out.cluster_token && strcmp(out2.cluster_token, "secret-token") == 0);
  nx_config_release(&out);
  CHECK(out.cluster_token == NULL && out.bind_addr == NULL);
  nx_config_release(&out); /* twice is fine */
  nx_config_release(NULL);
  CHECK(strcmp(out2.bind_addr, "[::1]:5000") == 0);
  nx_config_release(&out2);

  /* Empty strings mean unset; a degree without K_REGULAR is kept. */
  CHECK(nexar_config_default(&c) == 0);
  c.cluster_token = "";
  c.bind_addr = "";
  c.topology_degree = 2;
  c.compressed_allreduce_max_bytes = 0;
  c.collective_timeout_ms = 0;
  CHECK(nx_config_resolve(&c, &out) == 0);
  CHECK(out.cluster_token == NULL && out.bind_addr == NULL);
  CHECK(out.topology_degree == 2 && out.compressed_allreduce_max_bytes == 0);
  nx_config_release(&out);
}

static void test_print(void) {
  clear_env();
  nexar_config c;
  CHECK(nexar_config_default(&c) == 0);
  c.cluster_token = "do-not-print-me";
  c.topology = NEXAR_TOPO_K_REGULAR;
  c.topology_degree = 4;
  c.recovery_policy = NEXAR_RECOVERY_MANUAL;
  c.bulk_transport = 0;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (!f) return;
  nx_config_print(f, &c);
  fclose(f);
  for (size_t i = 0; i < NVARS; i++) {
    char line[128];
    snprintf(line, sizeof line, "%s=", all_vars[i]);
    if (!strstr(text, line)) {
      fprintf(stderr, "  print lacks %s\n", line);
      failures++;
    }
  }
  CHECK(strstr(text, "NEXAR_COLLECTIVE_TIMEOUT_MS=30000\n") != NULL);
  CHECK(strstr(text, "NEXAR_LARGE_MSG_BYTES=8388608\n") != NULL);
  CHECK(strstr(text, "NEXAR_BULK_TRANSPORT=0\n") != NULL);
  CHECK(strstr(text, "NEXAR_RECOVERY_POLICY=manual\n") != NULL);
  CHECK(strstr(text, "NEXAR_TOPOLOGY=k_regular:4\n") != NULL);
  CHECK(strstr(text, "NEXAR_TOPOLOGY_DEGREE=4\n") != NULL);
  CHECK(strstr(text, "NEXAR_CLUSTER_TOKEN=(set)\n") != NULL);
  CHECK(strstr(text, "NEXAR_BIND_ADDR=(unset)\n") != NULL);
  CHECK(strstr(text, "NEXAR_ADAPTER=(none)\n") != NULL);
  CHECK(strstr(text, "do-not-print-me") == NULL);
  free(text);

  c.cluster_token = NULL;
  c.bind_addr = "0.0.0.0:7000";
  c.topology = NEXAR_TOPO_HYPERCUBE;
  f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (!f) return;
  nx_config_print(f, &c);
  nx_config_print(f, NULL); /* no-op */
  fclose(f);
  CHECK(strstr(text, "NEXAR_CLUSTER_TOKEN=(unset)\n") != NULL);
  CHECK(strstr(text, "NEXAR_BIND_ADDR=0.0.0.0:7000\n") != NULL);
  CHECK(strstr(text, "NEXAR_TOPOLOGY=hypercube\n") != NULL);
  free(text);
}

static void test_env_helpers(void) {
  unsetenv("NX_TEST_VAR");
  uint32_t u = 77;
  int present = -1;
  CHECK(nx_env_u32("NX_TEST_VAR", &u, &present) == 0 && present == 0 && u == 77);
  setenv("NX_TEST_VAR", "", 1);
  CHECK(nx_env_u32("NX_TEST_VAR", &u, &present) == 0 && present == 0 && u == 77);
  setenv("NX_TEST_VAR", "42", 1);
  CHECK(nx_env_u32("NX_TEST_VAR", &u, &present) == 0 && present == 1 && u == 42);
  CHECK(nx_env_u32("NX_TEST_VAR", &u, NULL) == 0 && u == 42);
  setenv("NX_TEST_VAR", "4x", 1);
  CHECK(nx_env_u32("NX_TEST_VAR", &u, &present) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(present == 0 && u == 42 && err_has("NX_TEST_VAR='4x'"));

  uint16_t p = 1;
  setenv("NX_TEST_VAR", "65535", 1);
  CHECK(nx_env_u16("NX_TEST_VAR", &p, &present) == 0 && p == 65535 && present == 1);
  setenv("NX_TEST_VAR", "65536", 1);
  CHECK(nx_env_u16("NX_TEST_VAR", &p, &present) == NEXAR_ERR_INVALID_ARGUMENT && p == 65535);
  CHECK(err_has("NX_TEST_VAR='65536'"));

  int b = -1;
  setenv("NX_TEST_VAR", "True", 1);
  CHECK(nx_env_bool("NX_TEST_VAR", &b, &present) == 0 && b == 1 && present == 1);
  setenv("NX_TEST_VAR", "nah", 1);
  CHECK(nx_env_bool("NX_TEST_VAR", &b, &present) == NEXAR_ERR_INVALID_ARGUMENT && b == 1);

  size_t sz = 0;
  setenv("NX_TEST_VAR", "2MiB", 1);
  CHECK(nx_env_bytes("NX_TEST_VAR", &sz, &present) == 0 && sz == 2u << 20);

  const char *s = "keep";
  setenv("NX_TEST_VAR", "hello", 1);
  CHECK(nx_env_str("NX_TEST_VAR", &s, &present) == 0 && present == 1);
  CHECK(s == getenv("NX_TEST_VAR"));
  unsetenv("NX_TEST_VAR");
  s = "keep";
  CHECK(nx_env_str("NX_TEST_VAR", &s, &present) == 0 && present == 0 && strcmp(s, "keep") == 0);

  CHECK(nx_parse_u32("--world-size", "0x4", &u) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(err_has("--world-size='0x4'"));
  CHECK(nx_parse_u32("--world-size", NULL, &u) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(nx_parse_u32("x", "4294967295", &u) == 0 && u == 4294967295u);
  CHECK(nx_parse_bytes("x", "1G", &sz) == 0 && sz == (size_t)1 << 30);
  CHECK(nx_parse_bool("x", "OFF", &b) == 0 && b == 0);

  CHECK(strcmp(nx_topology_name(NEXAR_TOPO_K_REGULAR), "k_regular") == 0);
  CHECK(strcmp(nx_topology_name((nexar_topology)9), "?") == 0);
  CHECK(strcmp(nx_recovery_policy_name(NEXAR_RECOVERY_ABORT), "abort") == 0);
  CHECK(strcmp(nx_recovery_policy_name((nexar_recovery_policy)-1), "?") == 0);
}

/* Every numeric knob has a range: the environment and the struct are checked
 * the same way, and the error names the variable (or field) and the range. */
static void range_env_case(const char *var, const char *val, const char *range) {
  clear_env();
  setenv(var, val, 1);
  nexar_config c;
  int rc = nexar_config_default(&c);
  char want[256];
  snprintf(want, sizeof want, "%s='%s': out of range; allowed %s", var, val, range);
  if (rc != NEXAR_ERR_INVALID_ARGUMENT || !err_has(want)) {
    fprintf(stderr, "  %s=%s: rc %d, error '%s', want '%s'\n", var, val, rc, nexar_last_error(),
            want);
    failures++;
  }
  CHECK(cfg_same(&c, &base, want));
  /* the same value reaching resolve through a NULL config */
  nexar_config out;
  CHECK(nx_config_resolve(NULL, &out) == NEXAR_ERR_INVALID_ARGUMENT && err_has(want));
  clear_env();
}

static void test_ranges(void) {
  const char *ms = "1..86400000, or 0";
  range_env_case("NEXAR_PIPELINE_SEGMENT_BYTES", "1",
                 "16384 (16 KiB)..1073741824 (1 GiB)"); /* the 3.7 GB case */
  range_env_case("NEXAR_PIPELINE_SEGMENT_BYTES", "0", "16384 (16 KiB)..1073741824 (1 GiB)");
  range_env_case("NEXAR_PIPELINE_SEGMENT_BYTES", "2G", "16384 (16 KiB)..1073741824 (1 GiB)");
  range_env_case("NEXAR_LARGE_MSG_BYTES", "1023", "1024 (1 KiB)..1099511627776 (1 TiB)");
  range_env_case("NEXAR_LARGE_MSG_BYTES", "2T", "1024 (1 KiB)..1099511627776 (1 TiB)");
  range_env_case("NEXAR_COLLECTIVE_TIMEOUT_MS", "86400001", ms);
  range_env_case("NEXAR_BARRIER_TIMEOUT_MS", "4294967295", ms);
  range_env_case("NEXAR_RPC_TIMEOUT_MS", "99999999", ms);
  range_env_case("NEXAR_CONNECT_TIMEOUT_MS", "4294967295", ms);
  range_env_case("NEXAR_RECOVERY_TIMEOUT_MS", "86400001", ms);
  range_env_case("NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS", "86400001", ms);
  range_env_case("NEXAR_HEARTBEAT_INTERVAL_MS", "9", "10..600000");
  range_env_case("NEXAR_HEARTBEAT_INTERVAL_MS", "0", "10..600000");
  range_env_case("NEXAR_HEARTBEAT_TIMEOUT_MS", "19", "20..3600000");
  range_env_case("NEXAR_HEARTBEAT_TIMEOUT_MS", "3600001", "20..3600000");
  range_env_case("NEXAR_RING_MAX_WORLD", "65537", "1..65536, or 0");
  range_env_case("NEXAR_TOPOLOGY_DEGREE", "1", "2..65534, or 0");
  range_env_case("NEXAR_ELASTIC_MIN_WORLD", "0", "1..65536");
  range_env_case("NEXAR_ELASTIC_MIN_WORLD", "65537", "1..65536");
  range_env_case("NEXAR_ELASTIC_MAX_WORLD", "70000", "1..65536, or 0");

  /* the edges themselves are accepted */
  VAR_CASE("NEXAR_PIPELINE_SEGMENT_BYTES", "16K", pipeline_segment_bytes, 16u << 10);
  VAR_CASE("NEXAR_PIPELINE_SEGMENT_BYTES", "1GiB", pipeline_segment_bytes, 1u << 30);
  VAR_CASE("NEXAR_LARGE_MSG_BYTES", "1K", large_msg_bytes, 1024);
  VAR_CASE("NEXAR_LARGE_MSG_BYTES", "1T", large_msg_bytes, (size_t)1 << 40);
  VAR_CASE("NEXAR_HEARTBEAT_INTERVAL_MS", "10", heartbeat_interval_ms, 10);
  VAR_CASE("NEXAR_RING_MAX_WORLD", "0", ring_max_world, 0);
  VAR_CASE("NEXAR_ELASTIC_MAX_WORLD", "65536", elastic_max_world, 65536);

  /* explicitly set fields: the same ranges, naming the field and the variable */
  clear_env();
  nexar_config c;
  CHECK(nexar_config_default(&c) == 0);
#define MUT(stmt, needle)                                                                          \
  do {                                                                                             \
    nexar_config m_;                                                                               \
    memcpy(&m_, &c, sizeof m_);                                                                    \
    stmt;                                                                                          \
    invalid_case(&m_, needle);                                                                     \
  } while (0)
  MUT(m_.pipeline_segment_bytes = 1,
      "config.pipeline_segment_bytes = 1 is out of range: allowed 16384 (16 KiB)..1073741824 "
      "(1 GiB) (NEXAR_PIPELINE_SEGMENT_BYTES)");
  MUT(m_.pipeline_segment_bytes = SIZE_MAX, "config.pipeline_segment_bytes = 18446744073709551615");
  MUT(m_.large_msg_bytes = 100, "config.large_msg_bytes = 100 is out of range");
  MUT(m_.collective_timeout_ms = UINT32_MAX,
      "config.collective_timeout_ms = 4294967295 is out of range: allowed 1..86400000, or 0 "
      "(NEXAR_COLLECTIVE_TIMEOUT_MS)");
  MUT(m_.rpc_timeout_ms = NX_DAY_MS_TEST + 1, "config.rpc_timeout_ms");
  MUT(m_.heartbeat_interval_ms = 5, "config.heartbeat_interval_ms = 5");
  MUT(m_.heartbeat_timeout_ms = 4000000, "config.heartbeat_timeout_ms = 4000000");
  MUT(m_.ring_max_world = 100000, "config.ring_max_world = 100000");
  MUT(m_.elastic_max_world = 100000, "config.elastic_max_world = 100000");
  MUT(m_.topology_degree = 1, "config.topology_degree = 1");
  char longtok[5000];
  memset(longtok, 't', sizeof longtok - 1);
  longtok[sizeof longtok - 1] = '\0';
  MUT(m_.cluster_token = longtok, "config.cluster_token is longer than 4096 characters");
  MUT(m_.bind_addr = longtok, "config.bind_addr is longer than 300 characters");
#undef MUT
  /* strings from the environment are bounded too */
  setenv("NEXAR_CLUSTER_TOKEN", longtok, 1);
  CHECK(nexar_config_default(&c) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(err_has("NEXAR_CLUSTER_TOKEN: longer than 4096 characters"));
  CHECK(!err_has("tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt"));
  clear_env();
}

/* Valid but not implemented: UNSUPPORTED with a sentence, never a silent
 * host-memory fallback. Sparse topologies are implemented: a setting the
 * world cannot have is INVALID_ARGUMENT at formation, naming the field. */
static void test_unsupported(void) {
  clear_env();
  nexar_config c, out;
  CHECK(nexar_config_default(&c) == 0);
  c.topology = NEXAR_TOPO_K_REGULAR;
  c.topology_degree = 4;
  CHECK(nx_config_resolve(&c, &out) == 0);
  nx_config_release(&out);
  c.topology = NEXAR_TOPO_HYPERCUBE;
  CHECK(nx_config_resolve(&c, &out) == 0);
  nx_config_release(&out);
  /* adapters are implemented (issue 13); one without callbacks is refused */
  nexar_device_adapter bad = {sizeof bad, NULL, NULL, NULL, NULL, NULL,
                              NULL,       NULL, NULL, NULL, NULL};
  CHECK(nexar_config_default(&c) == 0);
  c.adapter = &bad;
  CHECK(nx_config_resolve(&c, &out) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(err_has("config.adapter") && err_has("to_host"));
  /* from the environment: K 6 in a world of 2 cannot be formed */
  nexar_client *cl[2] = {NULL, NULL};
  setenv("NEXAR_TOPOLOGY", "k_regular:6", 1);
  CHECK(nexar_config_default(&c) == 0 && c.topology == NEXAR_TOPO_K_REGULAR);
  CHECK(nexar_bootstrap_local(cl, 2, NULL) == NEXAR_ERR_INVALID_ARGUMENT && !cl[0]);
  CHECK(err_has("config.topology_degree 6"));
  setenv("NEXAR_TOPOLOGY", "full_mesh", 1);
  CHECK(nexar_config_default(&c) == 0);
  c.adapter = &bad;
  CHECK(nexar_bootstrap_local(cl, 2, &c) == NEXAR_ERR_INVALID_ARGUMENT && !cl[0]);
  CHECK(nexar_join(&cl[0], "127.0.0.1:9", &c) == NEXAR_ERR_INVALID_ARGUMENT && !cl[0]);
  CHECK(err_has("config.adapter"));
  CHECK(nx_config_resolve(NULL, &out) == 0);
  nx_config_release(&out);
  clear_env();
}

/* The environment-only knobs (core/knobs.c): parsed, bounded, named in
 * errors, refused by resolve when malformed, printed. */
static const char *const knob_vars[] = {
    "NEXAR_DEBUG",          "NEXAR_DEBUG_FILE",     "NEXAR_DUMP_ON_TIMEOUT", "NEXAR_LANE",
    "NEXAR_YIELD_US",       "NEXAR_SPIN_US",        "NEXAR_QUIC_CC",         "NEXAR_REDUCE_IMPL",
    "NEXAR_BULK_TCP_LOCAL", "NEXAR_BULK_MIN_BYTES", "NEXAR_TEST_IMPAIR",     "NEXAR_CPU_BIND"};
#define NKNOBS (sizeof knob_vars / sizeof knob_vars[0])

static void clear_knobs(void) {
  for (size_t i = 0; i < NKNOBS; i++)
    unsetenv(knob_vars[i]);
}

static void knob_bad(const char *var, const char *val, const char *needle) {
  clear_knobs();
  setenv(var, val, 1);
  nx_knobs k;
  int rc = nx_knobs_from_env(&k);
  if (rc != NEXAR_ERR_INVALID_ARGUMENT || !err_has(needle)) {
    fprintf(stderr, "  %s=%s: rc %d, error '%s', want '%s'\n", var, val, rc, nexar_last_error(),
            needle);
    failures++;
  }
  nx_knobs d;
  nx_knobs_defaults(&d);
  CHECK(memcmp(&k, &d, sizeof k) == 0); /* defaults on failure */
  nexar_config out;
  CHECK(nx_config_resolve(NULL, &out) == NEXAR_ERR_INVALID_ARGUMENT && err_has(needle));
  clear_knobs();
}

static void test_knobs(void) {
  clear_env();
  clear_knobs();
  nx_knobs k;
  CHECK(nx_knobs_from_env(&k) == 0);
  CHECK(k.debug == NX_LOG_OFF && k.debug_file == NULL && k.dump_on_timeout == 0 && k.lane == 1);
  CHECK(k.yield_us == NX_KNOB_AUTO && k.spin_us == NX_KNOB_AUTO && k.cpu_bind == NX_BIND_AUTO);
  CHECK(strcmp(k.quic_cc, "bbr2") == 0 && strcmp(k.reduce_impl, "auto") == 0);
  CHECK(k.bulk_tcp_local == 0 && k.bulk_min_bytes == NX_KNOB_AUTO_SIZE && k.test_impair == NULL);

  setenv("NEXAR_DEBUG", "INFO", 1);
  setenv("NEXAR_DEBUG_FILE", "/tmp/x-%r.log", 1);
  setenv("NEXAR_DUMP_ON_TIMEOUT", "yes", 1);
  setenv("NEXAR_LANE", "0", 1);
  setenv("NEXAR_YIELD_US", "1000000", 1);
  setenv("NEXAR_SPIN_US", "0", 1);
  setenv("NEXAR_QUIC_CC", "Cubic", 1);
  setenv("NEXAR_REDUCE_IMPL", "scalar", 1);
  setenv("NEXAR_BULK_TCP_LOCAL", "1", 1);
  setenv("NEXAR_BULK_MIN_BYTES", "0", 1);
  setenv("NEXAR_TEST_IMPAIR", "loss=1%", 1);
  setenv("NEXAR_CPU_BIND", "None", 1);
  CHECK(nx_knobs_from_env(&k) == 0);
  CHECK(k.cpu_bind == NX_BIND_NONE);
  CHECK(k.debug == NX_LOG_INFO && strcmp(k.debug_file, "/tmp/x-%r.log") == 0);
  CHECK(k.dump_on_timeout == 1 && k.lane == 0 && k.yield_us == 1000000 && k.spin_us == 0);
  CHECK(strcmp(k.quic_cc, "cubic") == 0 && strcmp(k.reduce_impl, "scalar") == 0);
  CHECK(k.bulk_tcp_local == 1 && k.bulk_min_bytes == 0 && strcmp(k.test_impair, "loss=1%") == 0);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(f != NULL);
  if (f) {
    nexar_config c;
    nexar_config_default(&c);
    nx_config_print_all(f, &c);
    fclose(f);
    for (size_t i = 0; i < NKNOBS; i++) {
      char line[128];
      snprintf(line, sizeof line, "\n%s=", knob_vars[i]);
      if (!strstr(text, line)) {
        fprintf(stderr, "  print_all lacks %s\n", line + 1);
        failures++;
      }
    }
    CHECK(strstr(text, "NEXAR_QUIC_CC=cubic\n") && strstr(text, "NEXAR_DEBUG=info\n"));
    CHECK(strstr(text, "NEXAR_YIELD_US=1000000\n") && strstr(text, "NEXAR_LANE=0\n"));
    CHECK(strstr(text, "NEXAR_CPU_BIND=none\n"));
    CHECK(strstr(text, "NEXAR_COLLECTIVE_TIMEOUT_MS=30000\n"));
    free(text);
  }
  setenv("NEXAR_DEBUG", "1", 1);
  setenv("NEXAR_SPIN_US", "auto", 1);
  CHECK(nx_knobs_from_env(&k) == 0 && k.debug == NX_LOG_DEBUG && k.spin_us == NX_KNOB_AUTO);
  clear_knobs();

  knob_bad("NEXAR_DEBUG", "verbose", "NEXAR_DEBUG='verbose': expected one of off, error");
  knob_bad("NEXAR_DUMP_ON_TIMEOUT", "maybe", "NEXAR_DUMP_ON_TIMEOUT='maybe'");
  knob_bad("NEXAR_LANE", "2", "NEXAR_LANE='2'");
  knob_bad("NEXAR_YIELD_US", "1000001",
           "NEXAR_YIELD_US='1000001': out of range; allowed 0..1000000");
  knob_bad("NEXAR_SPIN_US", "-1", "NEXAR_SPIN_US='-1'");
  knob_bad("NEXAR_QUIC_CC", "vegas",
           "NEXAR_QUIC_CC='vegas': expected one of bbr2, bbr, cubic, reno");
  knob_bad("NEXAR_REDUCE_IMPL", "neon", "NEXAR_REDUCE_IMPL='neon'");
  knob_bad("NEXAR_CPU_BIND", "socket", "NEXAR_CPU_BIND='socket': expected one of auto, core, none");
  knob_bad("NEXAR_BULK_TCP_LOCAL", "x", "NEXAR_BULK_TCP_LOCAL='x'");
  knob_bad("NEXAR_BULK_MIN_BYTES", "2T", "NEXAR_BULK_MIN_BYTES='2T': out of range");
  char longv[5000];
  memset(longv, 'a', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  knob_bad("NEXAR_DEBUG_FILE", longv, "NEXAR_DEBUG_FILE: longer than 4095 characters");
  knob_bad("NEXAR_TEST_IMPAIR", longv, "NEXAR_TEST_IMPAIR: longer than 512 characters");
}

int main(void) {
  test_defaults();
  test_null_and_sizes();
  test_partial_fill();
  test_every_variable();
  test_suffixes();
  test_booleans();
  test_malformed();
  test_empty_is_unset();
  test_resolve_validation();
  test_resolve_ok();
  test_ranges();
  test_unsupported();
  test_print();
  test_knobs();
  test_env_helpers();
  clear_env();
  if (failures) {
    fprintf(stderr, "config_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("config_test: ok\n");
  return 0;
}
