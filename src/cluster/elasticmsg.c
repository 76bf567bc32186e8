/* Strict codec for the elastic-membership messages (layout in bootmsg.h):
 * as bootmsg.c, every decoder validates the whole buffer before it allocates,
 * and what it allocates is bounded by the input's own length. */
#include "cluster/bootcodec.h"

/* ---------------------------------------------------------------- WAITING */

int nx_waiting_encode(uint8_t **out, size_t *len) {
  return header_only_encode(NX_BOOT_WAITING, "waiting", out, len);
}

int nx_waiting_decode(const uint8_t *in, size_t len) {
  return header_only_decode(in, len, NX_BOOT_WAITING, "waiting");
}

/* ------------------------------------------------------- member tables */

/* Distinct ids, checked with a bitmap of every possible id (a table of n
 * entries from a peer would make pairwise checks quadratic). 1 if distinct,
 * 0 if not, NEXAR_ERR_NOMEM. */
typedef struct idset {
  uint8_t *bits;
} idset;

static int idset_add(idset *s, uint32_t id) {
  if (!s->bits && !(s->bits = nx_calloc(NX_BOOT_WORLD_MAX / 8, 1))) return NEXAR_ERR_NOMEM;
  uint8_t bit = (uint8_t)(1u << (id % 8));
  if (s->bits[id / 8] & bit) return 0;
  s->bits[id / 8] |= bit;
  return 1;
}

/* Encoded size of n entries, or 0 if one is invalid (ids distinct). */
static size_t members_size(const nx_member_addr *m, uint32_t n) {
  size_t sz = 0;
  for (uint32_t i = 0; i < n; i++) {
    size_t la, lh;
    if (m[i].id >= NX_BOOT_WORLD_MAX || !cstr_len(m[i].addr, NX_ADDR_MAX, &la) ||
        !addr_ok((const uint8_t *)m[i].addr, la) || !cstr_len(m[i].host, NX_HOST_MAX, &lh) ||
        !text_ok((const uint8_t *)m[i].host, lh))
      return 0;
    sz += 4 + 2 + la + lh;
  }
  idset seen = {NULL};
  for (uint32_t i = 0; i < n && sz; i++)
    if (idset_add(&seen, m[i].id) != 1) sz = 0;
  free(seen.bits);
  return sz;
}

static void wr_members(wr *w, const nx_member_addr *m, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    wr_u32(w, m[i].id);
    wr_str8(w, m[i].addr);
    wr_str8(w, m[i].host);
  }
}

/* Walks n entries; copies them into out when it is set (second pass). Ids
 * must be distinct: checked on the copy, where out holds the earlier ones. */
static int rd_members(rd *r, uint32_t n, nx_member_addr *out, const char *what) {
  idset seen = {NULL};
  int rc = 0;
  for (uint32_t i = 0; i < n && !rc; i++) {
    uint32_t id;
    const uint8_t *a, *h;
    size_t la, lh;
    if (rd_u32(r, &id) || rd_str8(r, NX_ADDR_MAX, &a, &la) || rd_str8(r, NX_HOST_MAX, &h, &lh)) {
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: truncated entry %u", what, (unsigned)i);
      break;
    }
    if (id >= NX_BOOT_WORLD_MAX || !addr_ok(a, la) || !text_ok(h, lh)) {
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: bad entry %u", what, (unsigned)i);
      break;
    }
    if (!out) continue;
    int fresh = idset_add(&seen, id);
    if (fresh != 1) {
      rc = fresh ? nx_fail(fresh, "bootstrap %s: out of memory", what)
                 : nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: member id %u twice", what,
                           (unsigned)id);
      break;
    }
    out[i].id = id;
    memcpy(out[i].addr, a, la);
    out[i].addr[la] = 0;
    memcpy(out[i].host, h, lh);
    out[i].host[lh] = 0;
  }
  free(seen.bits);
  return rc;
}

/* Decodes the table of n entries at r (which starts there) into *m (calloc'd). */
static int decode_members(rd *r, uint32_t n, nx_member_addr **m, const char *what) {
  /* every entry takes at least 6 bytes: bounds n by the input before allocating */
  if ((r->len - r->off) / 6 < n)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: %zu bytes cannot hold %u entries", what,
                   r->len - r->off, (unsigned)n);
  rd probe = *r;
  int rc = rd_members(&probe, n, NULL, what);
  if (rc) return rc;
  if (probe.off != probe.len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: trailing bytes", what);
  nx_member_addr *t = nx_calloc(n ? n : 1, sizeof *t);
  if (!t) return nx_fail(NEXAR_ERR_NOMEM, "bootstrap %s: out of memory", what);
  if ((rc = rd_members(r, n, t, what))) {
    free(t);
    return rc;
  }
  *m = t;
  return 0;
}

/* -------------------------------------------------------------- ADMIT_REQ */

int nx_admit_req_encode(const nx_admit_req *m, uint8_t **out, size_t *len) {
  if (!m || !out || !len || (m->n && !m->m))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admit request encode: NULL");
  size_t t = m->n ? members_size(m->m, m->n) : 0;
  if (m->n == 0 || m->n > NX_BOOT_WORLD_MAX || t == 0 || m->old_world == 0 ||
      m->old_world > NX_BOOT_WORLD_MAX || m->max_new > NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admit request encode: invalid field");
  wr w = {NULL, 0};
  int rc = alloc_out(HDR_LEN + 28 + t, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_ADMIT_REQ);
  wr_u32(&w, (uint32_t)m->comm_id);
  wr_u32(&w, (uint32_t)(m->comm_id >> 32));
  wr_u32(&w, (uint32_t)m->epoch);
  wr_u32(&w, (uint32_t)(m->epoch >> 32));
  wr_u32(&w, m->old_world);
  wr_u32(&w, m->max_new);
  wr_u32(&w, m->n);
  wr_members(&w, m->m, m->n);
  *len = w.off;
  return 0;
}

static int rd_u64(rd *r, uint64_t *v) {
  uint32_t lo, hi;
  if (rd_u32(r, &lo) || rd_u32(r, &hi)) return -1;
  *v = (uint64_t)hi << 32 | lo;
  return 0;
}

int nx_admit_req_decode(const uint8_t *in, size_t len, nx_admit_req *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admit request decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap admit request: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_ADMIT_REQ, "admit request");
  if (rc) return rc;
  nx_admit_req d = {0};
  if (rd_u64(&r, &d.comm_id) || rd_u64(&r, &d.epoch) || rd_u32(&r, &d.old_world) ||
      rd_u32(&r, &d.max_new) || rd_u32(&r, &d.n))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap admit request: truncated");
  if (d.n == 0 || d.n > NX_BOOT_WORLD_MAX || d.old_world == 0 || d.old_world > NX_BOOT_WORLD_MAX ||
      d.max_new > NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap admit request: %u stayers of %u, room %u",
                   (unsigned)d.n, (unsigned)d.old_world, (unsigned)d.max_new);
  if ((rc = decode_members(&r, d.n, &d.m, "admit request"))) return rc;
  *m = d;
  return 0;
}

void nx_admit_req_free(nx_admit_req *m) {
  if (!m) return;
  free(m->m);
  m->m = NULL;
  m->n = 0;
}

/* ------------------------------------------------------------- ADMIT_LIST */

int nx_admit_list_encode(const nx_admit_list *m, uint8_t **out, size_t *len) {
  if (!m || !out || !len || (m->n && !m->m))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admit list encode: NULL");
  size_t t = m->n ? members_size(m->m, m->n) : 0;
  if (m->n > NX_BOOT_WORLD_MAX || (m->n && t == 0))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admit list encode: invalid entry");
  wr w = {NULL, 0};
  int rc = alloc_out(HDR_LEN + 4 + t, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_ADMIT_LIST);
  wr_u32(&w, m->n);
  wr_members(&w, m->m, m->n);
  *len = w.off;
  return 0;
}

int nx_admit_list_decode(const uint8_t *in, size_t len, nx_admit_list *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admit list decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap admit list: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_ADMIT_LIST, "admit list");
  if (rc) return rc;
  uint32_t n;
  if (rd_u32(&r, &n)) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap admit list: truncated");
  if (n > NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap admit list: %u entries", (unsigned)n);
  nx_member_addr *t = NULL;
  if ((rc = decode_members(&r, n, &t, "admit list"))) return rc;
  m->n = n;
  m->m = t;
  return 0;
}

void nx_admit_list_free(nx_admit_list *m) {
  if (!m) return;
  free(m->m);
  m->m = NULL;
  m->n = 0;
}

/* ------------------------------------------------------------------- VIEW */

static int view_ok(uint32_t nstay, uint32_t n, uint32_t old_world, const uint32_t *ids) {
  if (nstay == 0 || nstay >= n || n > NX_BOOT_WORLD_MAX || old_world == 0 ||
      old_world > NX_BOOT_WORLD_MAX || nstay > old_world)
    return 0;
  idset seen = {NULL};
  int ok = 1;
  for (uint32_t i = 0; ids && i < n && ok; i++)
    ok = ids[i] < NX_BOOT_WORLD_MAX && idset_add(&seen, ids[i]) == 1;
  free(seen.bits);
  return ok;
}

int nx_view_encode(const nx_view_msg *m, uint8_t **out, size_t *len) {
  if (!m || !out || !len || !m->ids)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "view encode: NULL");
  if (!view_ok(m->nstay, m->n, m->old_world, m->ids))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "view encode: invalid field");
  wr w = {NULL, 0};
  int rc = alloc_out(HDR_LEN + 28 + 4 * (size_t)m->n, out, &w);
  if (rc) return rc;
  wr_header(&w, NX_BOOT_VIEW);
  wr_u32(&w, (uint32_t)m->comm_id);
  wr_u32(&w, (uint32_t)(m->comm_id >> 32));
  wr_u32(&w, (uint32_t)m->epoch);
  wr_u32(&w, (uint32_t)(m->epoch >> 32));
  wr_u32(&w, m->old_world);
  wr_u32(&w, m->nstay);
  wr_u32(&w, m->n);
  for (uint32_t i = 0; i < m->n; i++)
    wr_u32(&w, m->ids[i]);
  *len = w.off;
  return 0;
}

int nx_view_decode(const uint8_t *in, size_t len, nx_view_msg *m) {
  if (!m) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "view decode: NULL");
  memset(m, 0, sizeof *m);
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap view: empty");
  rd r = {in, len, 0};
  int rc = rd_header(&r, NX_BOOT_VIEW, "view");
  if (rc) return rc;
  nx_view_msg d = {0};
  if (rd_u64(&r, &d.comm_id) || rd_u64(&r, &d.epoch) || rd_u32(&r, &d.old_world) ||
      rd_u32(&r, &d.nstay) || rd_u32(&r, &d.n))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap view: truncated");
  if (!view_ok(d.nstay, d.n, d.old_world, NULL) || len - r.off != 4 * (size_t)d.n)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap view: %u members (%u staying) in %zu bytes",
                   (unsigned)d.n, (unsigned)d.nstay, len - r.off);
  d.ids = malloc(4 * (size_t)d.n);
  if (!d.ids) return nx_fail(NEXAR_ERR_NOMEM, "bootstrap view: out of memory");
  for (uint32_t i = 0; i < d.n; i++)
    rd_u32(&r, &d.ids[i]);
  if (!view_ok(d.nstay, d.n, d.old_world, d.ids)) {
    free(d.ids);
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap view: a member id is too large or repeated");
  }
  *m = d;
  return 0;
}

void nx_view_free(nx_view_msg *m) {
  if (!m) return;
  free(m->ids);
  m->ids = NULL;
  m->n = 0;
}
