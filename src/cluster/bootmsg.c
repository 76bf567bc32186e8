/* Strict codec for the bootstrap messages (layout in bootmsg.h). Every decoder walks the whole
 * buffer once to validate it, allocates only after that, then copies; so hostile input can make
 * us allocate at most a small multiple of its own length and a failed decode owns nothing. */
#include "cluster/bootmsg.h"

#include "cluster/bootcodec.h"
#include "core/common.h"

#include <stdlib.h>
#include <string.h>

static int hello_fields_ok(uint32_t req, uint32_t world, uint32_t topo, uint32_t degree) {
  if (world != 0 && !world_ok(world)) return 0;
  if (req != NX_BOOT_ANY_RANK && (req >= NX_BOOT_WORLD_MAX || (world != 0 && req >= world)))
    return 0;
  return topo <= (uint32_t)NEXAR_TOPO_HYPERCUBE && degree < NX_BOOT_WORLD_MAX;
}

static int refuse_code_ok(int32_t code) {
  return code < 0 && code >= -1024;
}

int nx_bootmsg_type(const uint8_t *in, size_t len) {
  if (!in || len < HDR_LEN)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap message: %zu bytes is too short", len);
  if (in[0] < NX_BOOT_HELLO || in[0] > NX_BOOT_LAST)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap message: unknown type %u", (unsigned)in[0]);
  return in[0];
}

/* ------------------------------------------------------------------ HELLO */

int nx_hello_encode(const nx_hello *m, uint8_t **out, size_t *len) {
  size_t la, lh;
  if (!m || !out || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hello encode: NULL");
  if (m->version != 0 && m->version != NX_BOOT_VERSION)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hello encode: version %u", (unsigned)m->version);
  if (!cstr_len(m->listen_addr, NX_ADDR_MAX, &la) || !addr_ok((const uint8_t *)m->listen_addr, la))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hello encode: bad listen address");
  if (!cstr_len(m->hostname, NX_HOST_MAX, &lh) || !text_ok((const uint8_t *)m->hostname, lh))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hello encode: bad hostname");
  if (!m->csr || m->csr_len == 0 || m->csr_len > NX_BOOT_BLOB_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hello encode: CSR of %zu bytes", m->csr_len);
  if (!hello_fields_ok(m->requested_rank, m->world_size, m->topology, m->topology_degree))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "hello encode: rank %u, world %u, topology %u/%u: a rank outside the world, a "
                   "world over %u or an unknown topology",
                   (unsigned)m->requested_rank, (unsigned)m->world_size, (unsigned)m->topology,
                   (unsigned)m->topology_degree, NX_BOOT_WORLD_MAX);
  size_t n = HDR_LEN + 16 + 1 + la + 1 + lh + 4 + m->csr_len;
  wr w = {NULL, 0};
  int rc = alloc_out(n, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_HELLO);
  wr_u32(&w, m->requested_rank);
  wr_u32(&w, m->world_size);
  wr_u32(&w, m->topology);
  wr_u32(&w, m->topology_degree);
  wr_str8(&w, m->listen_addr);
  wr_str8(&w, m->hostname);
  wr_blob(&w, m->csr, m->csr_len);
  *len = w.off;
  return 0;
}

int nx_hello_decode(const uint8_t *in, size_t len, nx_hello *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hello decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap hello: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_HELLO, "hello");
  if (rc) return rc;
  uint32_t req, world, topo, degree;
  const uint8_t *addr, *host, *csr;
  size_t la, lh, lc;
  if (rd_u32(&r, &req) || rd_u32(&r, &world) || rd_u32(&r, &topo) || rd_u32(&r, &degree) ||
      rd_str8(&r, NX_ADDR_MAX, &addr, &la) || rd_str8(&r, NX_HOST_MAX, &host, &lh) ||
      rd_blob(&r, NX_BOOT_BLOB_MAX, &csr, &lc))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap hello: truncated or oversized field");
  if (r.off != len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap hello: %zu trailing bytes", len - r.off);
  if (!hello_fields_ok(req, world, topo, degree))
    return nx_fail(NEXAR_ERR_PROTOCOL,
                   "bootstrap hello: bad fields (rank %u, world %u, topology %u/%u)", (unsigned)req,
                   (unsigned)world, (unsigned)topo, (unsigned)degree);
  if (!addr_ok(addr, la))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap hello: listen address is not host:port");
  if (!text_ok(host, lh))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap hello: hostname has control characters");
  uint8_t *c = malloc(lc);
  if (!c) return nx_fail(NEXAR_ERR_NOMEM, "bootstrap hello: out of memory");
  memcpy(c, csr, lc);
  m->version = NX_BOOT_VERSION;
  m->requested_rank = req;
  m->world_size = world;
  m->topology = topo;
  m->topology_degree = degree;
  memcpy(m->listen_addr, addr, la);
  memcpy(m->hostname, host, lh);
  m->csr = c;
  m->csr_len = lc;
  return 0;
}

void nx_hello_free(nx_hello *m) {
  if (!m) return;
  free(m->csr);
  m->csr = NULL;
  m->csr_len = 0;
}

/* ---------------------------------------------------------------- WELCOME */

int nx_welcome_encode(const nx_welcome *m, uint8_t **out, size_t *len) {
  if (!m || !out || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "welcome encode: NULL");
  if (!world_ok(m->world_size) || m->rank >= m->world_size)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "welcome encode: rank %u of world %u",
                   (unsigned)m->rank, (unsigned)m->world_size);
  if (!m->ca_cert || m->ca_len == 0 || m->ca_len > NX_BOOT_BLOB_MAX || !m->cert ||
      m->cert_len == 0 || m->cert_len > NX_BOOT_BLOB_MAX || !m->addrs || !m->hosts)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "welcome encode: missing or oversized field");
  size_t n = HDR_LEN + 8 + 16 + 4 + m->ca_len + 4 + m->cert_len;
  for (uint32_t i = 0; i < m->world_size; i++) {
    size_t la, lh;
    if (!cstr_len(m->addrs[i], NX_ADDR_MAX, &la) ||
        (la && !addr_ok((const uint8_t *)m->addrs[i], la)))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "welcome encode: bad address for rank %u",
                     (unsigned)i);
    if (!cstr_len(m->hosts[i], NX_HOST_MAX, &lh) || !text_ok((const uint8_t *)m->hosts[i], lh))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "welcome encode: bad hostname for rank %u",
                     (unsigned)i);
    n += 2 + la + lh;
  }
  wr w = {NULL, 0};
  int rc = alloc_out(n, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_WELCOME);
  wr_u32(&w, m->rank);
  wr_u32(&w, m->world_size);
  wr_raw(&w, m->cluster_id, 16);
  wr_blob(&w, m->ca_cert, m->ca_len);
  wr_blob(&w, m->cert, m->cert_len);
  for (uint32_t i = 0; i < m->world_size; i++) {
    wr_str8(&w, m->addrs[i]);
    wr_str8(&w, m->hosts[i]);
  }
  *len = w.off;
  return 0;
}

/* Walks the per-rank table; copies into m's arrays when they are set (second pass). */
static int welcome_table(rd *r, uint32_t world, nx_welcome *m) {
  for (uint32_t i = 0; i < world; i++) {
    const uint8_t *a, *h;
    size_t la, lh;
    if (rd_str8(r, NX_ADDR_MAX, &a, &la) || rd_str8(r, NX_HOST_MAX, &h, &lh))
      return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: truncated entry for rank %u",
                     (unsigned)i);
    if (la && !addr_ok(a, la)) /* empty: not a member of the view */
      return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: bad address for rank %u", (unsigned)i);
    if (!text_ok(h, lh))
      return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: bad hostname for rank %u",
                     (unsigned)i);
    if (m) {
      memcpy(m->addrs[i], a, la);
      memcpy(m->hosts[i], h, lh);
    }
  }
  return 0;
}

int nx_welcome_decode(const uint8_t *in, size_t len, nx_welcome *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "welcome decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_WELCOME, "welcome");
  if (rc) return rc;
  uint32_t rank, world;
  const uint8_t *cid, *ca, *cert;
  size_t lca, lcert;
  if (rd_u32(&r, &rank) || rd_u32(&r, &world) || rd_raw(&r, 16, &cid) ||
      rd_blob(&r, NX_BOOT_BLOB_MAX, &ca, &lca) || rd_blob(&r, NX_BOOT_BLOB_MAX, &cert, &lcert))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: truncated or oversized field");
  if (!world_ok(world) || rank >= world)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: rank %u of world %u", (unsigned)rank,
                   (unsigned)world);
  /* Every entry takes at least 2 bytes, so this bounds world by the input before allocating. */
  if ((len - r.off) / 2 < world)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: %zu bytes cannot hold %u entries",
                   len - r.off, (unsigned)world);
  size_t table_at = r.off;
  rc = welcome_table(&r, world, NULL);
  if (rc) return rc;
  if (r.off != len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap welcome: %zu trailing bytes", len - r.off);

  m->ca_cert = malloc(lca);
  m->cert = malloc(lcert);
  m->addrs = calloc(world, sizeof *m->addrs);
  m->hosts = calloc(world, sizeof *m->hosts);
  if (!m->ca_cert || !m->cert || !m->addrs || !m->hosts) {
    nx_welcome_free(m);
    return nx_fail(NEXAR_ERR_NOMEM, "bootstrap welcome: out of memory for %u ranks",
                   (unsigned)world);
  }
  memcpy(m->ca_cert, ca, lca);
  memcpy(m->cert, cert, lcert);
  r.off = table_at;
  rc = welcome_table(&r, world, m); /* cannot fail: same bytes as the first pass */
  if (rc) {
    nx_welcome_free(m);
    return rc;
  }
  m->rank = rank;
  m->world_size = world;
  memcpy(m->cluster_id, cid, 16);
  m->ca_len = lca;
  m->cert_len = lcert;
  return 0;
}

void nx_welcome_free(nx_welcome *m) {
  if (!m) return;
  free(m->ca_cert);
  free(m->cert);
  free(m->addrs);
  free(m->hosts);
  memset(m, 0, sizeof *m);
}

/* ----------------------------------------------------------------- REFUSE */

int nx_refuse_encode(const nx_refuse *m, uint8_t **out, size_t *len) {
  size_t lr;
  if (!m || !out || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "refuse encode: NULL");
  if (!refuse_code_ok(m->code))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "refuse encode: code %d", (int)m->code);
  if (!cstr_len(m->reason, sizeof m->reason, &lr) || !text_ok((const uint8_t *)m->reason, lr))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "refuse encode: bad reason text");
  wr w = {NULL, 0};
  int rc = alloc_out(HDR_LEN + 4 + 1 + lr, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_REFUSE);
  wr_u32(&w, (uint32_t)m->code);
  wr_str8(&w, m->reason);
  *len = w.off;
  return 0;
}

int nx_refuse_decode(const uint8_t *in, size_t len, nx_refuse *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "refuse decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap refuse: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_REFUSE, "refuse");
  if (rc) return rc;
  uint32_t code;
  const uint8_t *reason;
  size_t lr;
  if (rd_u32(&r, &code) || rd_str8(&r, sizeof m->reason, &reason, &lr))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap refuse: truncated");
  if (r.off != len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap refuse: %zu trailing bytes", len - r.off);
  /* Two's complement reinterpretation of the wire u32; memcpy avoids an out-of-range cast. */
  int32_t scode;
  memcpy(&scode, &code, sizeof scode);
  if (!refuse_code_ok(scode))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap refuse: code %d is not an error code",
                   (int)scode);
  if (!text_ok(reason, lr))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap refuse: reason has control characters");
  m->code = scode;
  memcpy(m->reason, reason, lr);
  return 0;
}

/* ------------------------------------------------------------ FORMED, LOST */

int nx_formed_encode(uint8_t **out, size_t *len) {
  return header_only_encode(NX_BOOT_FORMED, "formed", out, len);
}

int nx_formed_decode(const uint8_t *in, size_t len) {
  return header_only_decode(in, len, NX_BOOT_FORMED, "formed");
}

int nx_lost_encode(const nx_lost *m, uint8_t **out, size_t *len) {
  size_t lr;
  if (!m || !out || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "lost encode: NULL");
  if (m->rank >= NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "lost encode: rank %u", (unsigned)m->rank);
  if (!cstr_len(m->reason, sizeof m->reason, &lr) || !text_ok((const uint8_t *)m->reason, lr))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "lost encode: bad reason text");
  wr w = {NULL, 0};
  int rc = alloc_out(HDR_LEN + 4 + 1 + lr, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_LOST);
  wr_u32(&w, m->rank);
  wr_str8(&w, m->reason);
  *len = w.off;
  return 0;
}

int nx_lost_decode(const uint8_t *in, size_t len, nx_lost *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "lost decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap lost: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_LOST, "lost");
  if (rc) return rc;
  uint32_t rank;
  const uint8_t *reason;
  size_t lr;
  if (rd_u32(&r, &rank) || rd_str8(&r, sizeof m->reason, &reason, &lr))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap lost: truncated");
  if (r.off != len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap lost: %zu trailing bytes", len - r.off);
  if (rank >= NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap lost: rank %u", (unsigned)rank);
  if (!text_ok(reason, lr))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap lost: reason has control characters");
  m->rank = rank;
  memcpy(m->reason, reason, lr);
  return 0;
}
