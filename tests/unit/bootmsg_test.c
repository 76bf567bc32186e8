/* Bootstrap message codec: round trips, canonical re-encoding, and rejection of every
 * truncation, trailing bytes and each kind of bad field. */
#include "cluster/bootmsg.h"
#include "core/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #cond,     \
              nexar_last_error());                                                                 \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static uint8_t csr_bytes[300], ca_bytes[500], cert_bytes[400];

static void fill(uint8_t *b, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(seed + i * 7);
}

static nx_hello sample_hello(void) {
  nx_hello h;
  memset(&h, 0, sizeof h);
  h.version = NX_BOOT_VERSION;
  h.requested_rank = 3;
  h.world_size = 8;
  h.topology = NEXAR_TOPO_K_REGULAR;
  h.topology_degree = 4;
  snprintf(h.listen_addr, sizeof h.listen_addr, "%s", "10.0.0.7:4791");
  snprintf(h.hostname, sizeof h.hostname, "%s", "node-7");
  h.csr = csr_bytes;
  h.csr_len = sizeof csr_bytes;
  return h;
}

/* A decoder under test: returns its code and frees what it decoded. */
typedef int (*decode_fn)(const uint8_t *, size_t);

static int dec_hello(const uint8_t *b, size_t n) {
  nx_hello m;
  int rc = nx_hello_decode(b, n, &m);
  if (rc) CHECK(m.csr == NULL);
  nx_hello_free(&m);
  return rc;
}

static int dec_welcome(const uint8_t *b, size_t n) {
  nx_welcome m;
  int rc = nx_welcome_decode(b, n, &m);
  if (rc) CHECK(m.ca_cert == NULL && m.cert == NULL && m.addrs == NULL && m.hosts == NULL);
  nx_welcome_free(&m);
  return rc;
}

static int dec_refuse(const uint8_t *b, size_t n) {
  nx_refuse m;
  return nx_refuse_decode(b, n, &m);
}

/* Every strict prefix and one trailing byte must be refused with PROTOCOL. */
static void check_truncations(const uint8_t *buf, size_t len, decode_fn dec) {
  for (size_t i = 0; i < len; i++) {
    /* Copy into an exact-size allocation so ASan sees any read past the prefix. */
    uint8_t *p = malloc(i ? i : 1);
    CHECK(p != NULL);
    if (!p) return;
    memcpy(p, buf, i);
    int rc = dec(p, i);
    if (rc != NEXAR_ERR_PROTOCOL) fprintf(stderr, "  truncation to %zu bytes accepted\n", i);
    CHECK(rc == NEXAR_ERR_PROTOCOL);
    free(p);
  }
  uint8_t *p = malloc(len + 1);
  CHECK(p != NULL);
  if (!p) return;
  memcpy(p, buf, len);
  p[len] = 0;
  CHECK(dec(p, len + 1) == NEXAR_ERR_PROTOCOL);
  CHECK(dec(NULL, 0) == NEXAR_ERR_PROTOCOL);
  free(p);
}

static void put_u32(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[i] = (uint8_t)(v >> (8 * i));
}

static void test_hello(void) {
  nx_hello h = sample_hello(), d;
  uint8_t *buf = NULL, *again = NULL;
  size_t len = 0, len2 = 0;
  CHECK(nx_hello_encode(&h, &buf, &len) == 0);
  CHECK(nx_bootmsg_type(buf, len) == NX_BOOT_HELLO);
  CHECK(nx_hello_decode(buf, len, &d) == 0);
  CHECK(d.version == NX_BOOT_VERSION && d.requested_rank == 3 && d.world_size == 8);
  CHECK(d.topology == NEXAR_TOPO_K_REGULAR && d.topology_degree == 4);
  CHECK(strcmp(d.listen_addr, h.listen_addr) == 0 && strcmp(d.hostname, h.hostname) == 0);
  CHECK(d.csr_len == h.csr_len && memcmp(d.csr, h.csr, h.csr_len) == 0);
  CHECK(nx_hello_encode(&d, &again, &len2) == 0);
  CHECK(len2 == len && memcmp(again, buf, len) == 0);
  nx_hello_free(&d);
  free(again);
  check_truncations(buf, len, dec_hello);

  /* Wrong type and wrong version. */
  buf[0] = NX_BOOT_WELCOME;
  CHECK(dec_hello(buf, len) == NEXAR_ERR_PROTOCOL);
  buf[0] = NX_BOOT_HELLO;
  put_u32(buf + 1, 2);
  CHECK(dec_hello(buf, len) == NEXAR_ERR_PROTOCOL);
  CHECK(strstr(nexar_last_error(), "version") != NULL);
  put_u32(buf + 1, NX_BOOT_VERSION);
  /* requested rank >= world size */
  put_u32(buf + 5, 8);
  CHECK(dec_hello(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 5, 3);
  /* topology out of range */
  put_u32(buf + 13, 9);
  CHECK(dec_hello(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 13, NEXAR_TOPO_K_REGULAR);
  /* NUL and control character inside the listen address / hostname */
  size_t addr_at = 21 + 1;
  buf[addr_at + 2] = 0;
  CHECK(dec_hello(buf, len) == NEXAR_ERR_PROTOCOL);
  buf[addr_at + 2] = '.';
  size_t host_at = addr_at + strlen(h.listen_addr) + 1;
  buf[host_at] = '\n';
  CHECK(dec_hello(buf, len) == NEXAR_ERR_PROTOCOL);
  buf[host_at] = 'n';
  CHECK(dec_hello(buf, len) == 0);
  free(buf);

  /* Encoder refuses what the decoder would refuse. */
  nx_hello bad = sample_hello();
  bad.csr_len = NX_BOOT_BLOB_MAX + 1;
  CHECK(nx_hello_encode(&bad, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  bad = sample_hello();
  snprintf(bad.listen_addr, sizeof bad.listen_addr, "%s", "no-port");
  CHECK(nx_hello_encode(&bad, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  bad = sample_hello();
  memset(bad.hostname, 'x', sizeof bad.hostname); /* not NUL-terminated */
  CHECK(nx_hello_encode(&bad, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);

  /* Any-rank, unknown-world hello with an IPv6 listen address and an empty hostname. */
  nx_hello any = sample_hello();
  any.requested_rank = NX_BOOT_ANY_RANK;
  any.world_size = 0;
  snprintf(any.listen_addr, sizeof any.listen_addr, "%s", "[fd00::1]:9000");
  any.hostname[0] = 0;
  CHECK(nx_hello_encode(&any, &buf, &len) == 0);
  CHECK(nx_hello_decode(buf, len, &d) == 0);
  CHECK(d.requested_rank == NX_BOOT_ANY_RANK && d.world_size == 0);
  CHECK(strcmp(d.listen_addr, "[fd00::1]:9000") == 0 && d.hostname[0] == 0);
  nx_hello_free(&d);
  free(buf);
}

static void test_welcome(void) {
  enum { W = 5 };
  char addrs[W][NX_ADDR_MAX], hosts[W][NX_HOST_MAX];
  for (int i = 0; i < W; i++) {
    snprintf(addrs[i], sizeof addrs[i], "10.0.0.%d:%d", i + 1, 5000 + i);
    snprintf(hosts[i], sizeof hosts[i], "host%d", i);
  }
  snprintf(addrs[4], sizeof addrs[4], "%s", "[fe80::1%eth0]:7000");
  hosts[3][0] = 0;
  nx_welcome w = {.rank = 2, .world_size = W};
  for (int i = 0; i < 16; i++)
    w.cluster_id[i] = (uint8_t)(0xa0 + i);
  w.ca_cert = ca_bytes;
  w.ca_len = sizeof ca_bytes;
  w.cert = cert_bytes;
  w.cert_len = sizeof cert_bytes;
  w.addrs = addrs;
  w.hosts = hosts;

  uint8_t *buf = NULL, *again = NULL;
  size_t len = 0, len2 = 0;
  nx_welcome d;
  CHECK(nx_welcome_encode(&w, &buf, &len) == 0);
  CHECK(nx_bootmsg_type(buf, len) == NX_BOOT_WELCOME);
  CHECK(nx_welcome_decode(buf, len, &d) == 0);
  CHECK(d.rank == 2 && d.world_size == W && memcmp(d.cluster_id, w.cluster_id, 16) == 0);
  CHECK(d.ca_len == w.ca_len && memcmp(d.ca_cert, ca_bytes, d.ca_len) == 0);
  CHECK(d.cert_len == w.cert_len && memcmp(d.cert, cert_bytes, d.cert_len) == 0);
  for (int i = 0; i < W; i++) {
    CHECK(strcmp(d.addrs[i], addrs[i]) == 0);
    CHECK(strcmp(d.hosts[i], hosts[i]) == 0);
  }
  CHECK(nx_welcome_encode(&d, &again, &len2) == 0);
  CHECK(len2 == len && memcmp(again, buf, len) == 0);
  free(again);
  nx_welcome_free(&d);
  check_truncations(buf, len, dec_welcome);

  /* rank >= world, world 0, world over the limit, huge world in a small buffer */
  put_u32(buf + 5, W);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 5, 0);
  put_u32(buf + 9, 0);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 9, NX_BOOT_WORLD_MAX + 1);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 9, NX_BOOT_WORLD_MAX);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 9, W);
  put_u32(buf + 5, 2);
  /* CA length pointing past the end, and over the blob limit */
  put_u32(buf + 29, 0xfffffff0u);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 29, NX_BOOT_BLOB_MAX + 1);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 29, 0);
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 29, sizeof ca_bytes);
  CHECK(dec_welcome(buf, len) == 0);
  /* An address entry that is not host:port. */
  size_t tab = 33 + sizeof ca_bytes + 4 + sizeof cert_bytes;
  CHECK(buf[tab] == strlen(addrs[0]));
  buf[tab + 1 + 8] = 'x'; /* "10.0.0.1x5000" */
  CHECK(dec_welcome(buf, len) == NEXAR_ERR_PROTOCOL);
  free(buf);

  /* Encoder checks. */
  nx_welcome bad = w;
  bad.rank = W;
  CHECK(nx_welcome_encode(&bad, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  bad = w;
  bad.addrs = NULL;
  CHECK(nx_welcome_encode(&bad, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  snprintf(addrs[1], sizeof addrs[1], "no-port");
  CHECK(nx_welcome_encode(&w, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  /* an empty address: a member id outside the view (a joiner's table) */
  addrs[1][0] = 0;
  CHECK(nx_welcome_encode(&w, &buf, &len) == 0);
  nx_welcome gap;
  CHECK(nx_welcome_decode(buf, len, &gap) == 0 && gap.addrs[1][0] == 0);
  nx_welcome_free(&gap);
  free(buf);
}

static void test_refuse(void) {
  nx_refuse r = {.code = NEXAR_ERR_AUTH}, d;
  snprintf(r.reason, sizeof r.reason, "%s", "rank 3 is already taken by node-2");
  uint8_t *buf = NULL, *again = NULL;
  size_t len = 0, len2 = 0;
  CHECK(nx_refuse_encode(&r, &buf, &len) == 0);
  CHECK(nx_bootmsg_type(buf, len) == NX_BOOT_REFUSE);
  CHECK(nx_refuse_decode(buf, len, &d) == 0);
  CHECK(d.code == NEXAR_ERR_AUTH && strcmp(d.reason, r.reason) == 0);
  CHECK(nx_refuse_encode(&d, &again, &len2) == 0);
  CHECK(len2 == len && memcmp(again, buf, len) == 0);
  free(again);
  check_truncations(buf, len, dec_refuse);
  put_u32(buf + 5, 0); /* code 0 is not an error */
  CHECK(dec_refuse(buf, len) == NEXAR_ERR_PROTOCOL);
  put_u32(buf + 5, 7);
  CHECK(dec_refuse(buf, len) == NEXAR_ERR_PROTOCOL);
  free(buf);

  /* Longest reason (255 bytes) round-trips. */
  memset(r.reason, 'r', 255);
  r.reason[255] = 0;
  CHECK(nx_refuse_encode(&r, &buf, &len) == 0);
  CHECK(nx_refuse_decode(buf, len, &d) == 0 && strlen(d.reason) == 255);
  free(buf);
  memset(r.reason, 'r', sizeof r.reason); /* no NUL */
  CHECK(nx_refuse_encode(&r, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  r.reason[0] = 0;
  r.code = 1;
  CHECK(nx_refuse_encode(&r, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
}

static void test_type(void) {
  uint8_t b[5] = {0, 1, 0, 0, 0};
  CHECK(nx_bootmsg_type(NULL, 0) == NEXAR_ERR_PROTOCOL);
  CHECK(nx_bootmsg_type(b, 5) == NEXAR_ERR_PROTOCOL);
  b[0] = NX_BOOT_LAST + 1;
  CHECK(nx_bootmsg_type(b, 5) == NEXAR_ERR_PROTOCOL);
  b[0] = NX_BOOT_REFUSE;
  CHECK(nx_bootmsg_type(b, 4) == NEXAR_ERR_PROTOCOL);
  CHECK(nx_bootmsg_type(b, 5) == NX_BOOT_REFUSE);
}

static void test_formed_lost(void) {
  uint8_t *buf;
  size_t len;
  CHECK(nx_formed_encode(&buf, &len) == 0);
  CHECK(nx_bootmsg_type(buf, len) == NX_BOOT_FORMED && nx_formed_decode(buf, len) == 0);
  CHECK(nx_formed_decode(buf, len - 1) == NEXAR_ERR_PROTOCOL);
  free(buf);
  nx_lost l = {.rank = 7}, d;
  snprintf(l.reason, sizeof l.reason, "rank 7 was lost during formation");
  CHECK(nx_lost_encode(&l, &buf, &len) == 0);
  CHECK(nx_bootmsg_type(buf, len) == NX_BOOT_LOST && nx_lost_decode(buf, len, &d) == 0);
  CHECK(d.rank == 7 && strcmp(d.reason, l.reason) == 0);
  CHECK(nx_lost_decode(buf, len - 1, &d) == NEXAR_ERR_PROTOCOL);
  CHECK(nx_formed_decode(buf, len) == NEXAR_ERR_PROTOCOL);
  buf[5] = buf[6] = buf[7] = buf[8] = 0xff; /* rank past the world limit */
  CHECK(nx_lost_decode(buf, len, &d) == NEXAR_ERR_PROTOCOL);
  free(buf);
  l.rank = NX_BOOT_WORLD_MAX;
  CHECK(nx_lost_encode(&l, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
}

/* Elastic membership: admission request, list and view round-trip; repeated
 * ids, counts the input cannot hold and truncation are refused. */
static void test_elastic(void) {
  uint8_t *buf;
  size_t len;
  CHECK(nx_waiting_encode(&buf, &len) == 0);
  CHECK(nx_bootmsg_type(buf, len) == NX_BOOT_WAITING && nx_waiting_decode(buf, len) == 0);
  CHECK(nx_waiting_decode(buf, len - 1) == NEXAR_ERR_PROTOCOL);
  free(buf);
  nx_member_addr m[3] = {{.id = 0, .addr = "10.0.0.1:1000", .host = "a"},
                         {.id = 2, .addr = "10.0.0.3:1000", .host = "c"},
                         {.id = 9, .addr = "[fd00::9]:5", .host = ""}};
  nx_admit_req q = {.comm_id = 0xfedcba9876543210ull,
                    .epoch = 4,
                    .old_world = 3,
                    .max_new = 2,
                    .n = 3,
                    .m = m},
               dq;
  CHECK(nx_admit_req_encode(&q, &buf, &len) == 0);
  CHECK(nx_admit_req_decode(buf, len, &dq) == 0);
  CHECK(dq.comm_id == q.comm_id && dq.epoch == 4 && dq.n == 3 && dq.max_new == 2 &&
        dq.m[2].id == 9 && strcmp(dq.m[2].addr, m[2].addr) == 0 && strcmp(dq.m[0].host, "a") == 0);
  nx_admit_req_free(&dq);
  CHECK(nx_admit_req_decode(buf, len - 1, &dq) == NEXAR_ERR_PROTOCOL && dq.m == NULL);
  buf[29] = 0x60, buf[30] = 0xea, buf[31] = buf[32] = 0; /* n = 60000: more than the bytes hold */
  CHECK(nx_admit_req_decode(buf, len, &dq) == NEXAR_ERR_PROTOCOL && dq.m == NULL);
  free(buf);
  m[2].id = 2; /* repeated id */
  CHECK(nx_admit_req_encode(&q, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  nx_admit_list al = {.n = 3, .m = m}, dl;
  CHECK(nx_admit_list_encode(&al, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
  m[2].id = 9;
  CHECK(nx_admit_list_encode(&al, &buf, &len) == 0);
  /* the same bytes with the second id made equal to the first: refused */
  uint8_t *dup = malloc(len);
  memcpy(dup, buf, len);
  size_t second = 5 + 4 + 4 + 1 + strlen(m[0].addr) + 1 + strlen(m[0].host);
  dup[second] = 0;
  CHECK(nx_admit_list_decode(dup, len, &dl) == NEXAR_ERR_PROTOCOL && dl.m == NULL);
  free(dup);
  CHECK(nx_admit_list_decode(buf, len, &dl) == 0 && dl.n == 3 && dl.m[1].id == 2);
  nx_admit_list_free(&dl);
  free(buf);
  uint32_t ids[3] = {0, 2, 9};
  nx_view_msg v = {.comm_id = 5, .epoch = 1, .old_world = 3, .nstay = 2, .n = 3, .ids = ids}, dv;
  CHECK(nx_view_encode(&v, &buf, &len) == 0);
  CHECK(nx_view_decode(buf, len, &dv) == 0 && dv.n == 3 && dv.nstay == 2 && dv.ids[2] == 9 &&
        dv.comm_id == 5);
  nx_view_free(&dv);
  CHECK(nx_view_decode(buf, len - 1, &dv) == NEXAR_ERR_PROTOCOL && dv.ids == NULL);
  buf[len - 4] = 2; /* last id = an earlier one */
  buf[len - 3] = buf[len - 2] = buf[len - 1] = 0;
  CHECK(nx_view_decode(buf, len, &dv) == NEXAR_ERR_PROTOCOL && dv.ids == NULL);
  free(buf);
  v.nstay = 3; /* nobody new: not a view a joiner is offered */
  CHECK(nx_view_encode(&v, &buf, &len) == NEXAR_ERR_INVALID_ARGUMENT);
}

int main(void) {
  fill(csr_bytes, sizeof csr_bytes, 1);
  fill(ca_bytes, sizeof ca_bytes, 2);
  fill(cert_bytes, sizeof cert_bytes, 3);
  test_hello();
  test_welcome();
  test_refuse();
  test_type();
  test_formed_lost();
  test_elastic();
  if (failures) {
    fprintf(stderr, "bootmsg_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("bootmsg_test: ok\n");
  return 0;
}
