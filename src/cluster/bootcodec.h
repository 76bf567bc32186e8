/* The primitives of the bootstrap codec (bootmsg.c, elasticmsg.c): a bounds-
 * checked reader, a writer into a buffer sized beforehand, and the field
 * checks both directions share. Internal to src/cluster. */
#ifndef NX_CLUSTER_BOOTCODEC_H
#define NX_CLUSTER_BOOTCODEC_H

#include <stdlib.h>
#include <string.h>

#include "cluster/bootmsg.h"
#include "core/common.h"

#define HDR_LEN 5u /* u8 type + u32 version */

/* ------------------------------------------------------------------ reader */

typedef struct rd {
  const uint8_t *p;
  size_t len, off;
} rd;

static inline int rd_u8(rd *r, uint8_t *v) {
  if (r->len - r->off < 1) return -1;
  *v = r->p[r->off++];
  return 0;
}

static inline int rd_u32(rd *r, uint32_t *v) {
  if (r->len - r->off < 4) return -1;
  const uint8_t *b = r->p + r->off;
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  r->off += 4;
  return 0;
}

/* Points *b at n bytes inside the buffer (no copy). */
static inline int rd_raw(rd *r, size_t n, const uint8_t **b) {
  if (r->len - r->off < n) return -1;
  *b = r->p + r->off;
  r->off += n;
  return 0;
}

/* u8 length + bytes; the length must be < cap so the string fits with its NUL. */
static inline int rd_str8(rd *r, size_t cap, const uint8_t **s, size_t *n) {
  uint8_t l;
  if (rd_u8(r, &l) || l >= cap) return -1;
  *n = l;
  return rd_raw(r, l, s);
}

/* u32 length + bytes with 1 <= length <= max. */
static inline int rd_blob(rd *r, size_t max, const uint8_t **b, size_t *n) {
  uint32_t l;
  if (rd_u32(r, &l) || l == 0 || l > max) return -1;
  *n = l;
  return rd_raw(r, l, b);
}

/* ------------------------------------------------------------------ writer */

typedef struct wr {
  uint8_t *p;
  size_t off;
} wr;

static inline void wr_u8(wr *w, uint8_t v) {
  w->p[w->off++] = v;
}

static inline void wr_u32(wr *w, uint32_t v) {
  for (int i = 0; i < 4; i++)
    w->p[w->off++] = (uint8_t)(v >> (8 * i));
}

static inline void wr_raw(wr *w, const void *b, size_t n) {
  if (n) memcpy(w->p + w->off, b, n);
  w->off += n;
}

static inline void wr_str8(wr *w, const char *s) {
  size_t n = strlen(s); /* validated < 256 before */
  wr_u8(w, (uint8_t)n);
  wr_raw(w, s, n);
}

static inline void wr_blob(wr *w, const uint8_t *b, size_t n) {
  wr_u32(w, (uint32_t)n);
  wr_raw(w, b, n);
}

/* ------------------------------------------------------------- validation */

/* Text fields end up in log lines and error sentences: no NUL or control characters. */
static inline int text_ok(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] < 0x20 || s[i] == 0x7f) return 0;
  return 1;
}

/* "host:port" or "[v6]:port" with a nonzero port, from a conservative character set. */
static inline int addr_ok(const uint8_t *s, size_t n) {
  char buf[NX_ADDR_MAX], host[NX_ADDR_MAX];
  uint16_t port;
  if (n == 0 || n >= sizeof buf) return 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = s[i];
    int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '%' || c == '_';
    if (!ok) return 0;
  }
  memcpy(buf, s, n);
  buf[n] = 0;
  return nx_split_hostport(buf, host, sizeof host, &port) == 0 && port != 0;
}

/* A C string stored in a char[cap]: NUL-terminated inside the array. */
static inline int cstr_len(const char *s, size_t cap, size_t *n) {
  *n = strnlen(s, cap);
  return *n < cap;
}

static inline int world_ok(uint32_t w) {
  return w >= 1 && w <= NX_BOOT_WORLD_MAX;
}

/* Reads u8 type + u32 version and checks both. */
static inline int rd_header(rd *r, uint8_t want, const char *what) {
  uint8_t t;
  uint32_t v;
  if (rd_u8(r, &t) || rd_u32(r, &v))
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: truncated header", what);
  if (t != want)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: got message type %u", what, (unsigned)t);
  if (v != NX_BOOT_VERSION)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: protocol version %u, this build speaks %u",
                   what, (unsigned)v, (unsigned)NX_BOOT_VERSION);
  return 0;
}

static inline void wr_header(wr *w, uint8_t type) {
  wr_u8(w, type);
  wr_u32(w, NX_BOOT_VERSION);
}

static inline int alloc_out(size_t n, uint8_t **out, wr *w) {
  w->p = malloc(n);
  if (!w->p) return nx_fail(NEXAR_ERR_NOMEM, "bootstrap message: out of memory (%zu bytes)", n);
  w->off = 0;
  *out = w->p;
  return 0;
}

/* A message that is only its header (FORMED, WAITING). */
static inline int header_only_encode(uint8_t type, const char *what, uint8_t **out, size_t *len) {
  if (!out || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s encode: NULL", what);
  wr w = {NULL, 0};
  int rc = alloc_out(HDR_LEN, out, &w);
  if (rc) return rc;
  wr_header(&w, type);
  *len = w.off;
  return 0;
}

static inline int header_only_decode(const uint8_t *in, size_t len, uint8_t type,
                                     const char *what) {
  if (!in) return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: empty", what);
  rd r = {in, len, 0};
  int rc = rd_header(&r, type, what);
  if (rc) return rc;
  if (r.off != len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap %s: %zu trailing bytes", what, len - r.off);
  return 0;
}

#endif
