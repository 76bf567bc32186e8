/* Wire encoding of the agreement messages (see agree.h for the layout). */
#include <string.h>

#include "proto/agree.h"
#include "core/le.h"

size_t nx_agree_msg_size(uint8_t type, uint8_t has_acc, uint32_t n) {
  size_t nb = ((size_t)n + 7) / 8;
  switch (type) {
  case NX_AM_COLLECT:
  case NX_AM_NACK:
  case NX_AM_ACCEPTED:
    return NX_AGREE_HDR;
  case NX_AM_PROMISE:
    return NX_AGREE_HDR + 4 + nb + 1 + (has_acc ? 12 + nb : 0);
  case NX_AM_ACCEPT:
  case NX_AM_COMMIT:
    return NX_AGREE_HDR + 4 + nb;
  default:
    return 0;
  }
}

/* 1 if the bits of the last byte past n are zero. */
static int bits_clean(const uint8_t *bits, uint32_t n) {
  if (n % 8 == 0) return 1;
  return (bits[(n - 1) / 8] >> (n % 8)) == 0;
}

size_t nx_agree_encode(const nx_agree_msg *m, uint8_t *out, size_t cap) {
  if (m->n == 0 || m->n > NX_AGREE_MAX_N) return 0;
  size_t len = nx_agree_msg_size(m->type, m->has_acc, m->n);
  if (len == 0 || len > cap) return 0;
  size_t nb = ((size_t)m->n + 7) / 8;
  out[0] = NX_AGREE_VERSION;
  out[1] = m->type;
  out[2] = out[3] = 0;
  nx_put64(out + 4, m->epoch);
  nx_put32(out + 12, m->n);
  nx_put32(out + 16, m->b.round);
  nx_put32(out + 20, m->b.coord);
  uint8_t *p = out + NX_AGREE_HDR;
  if (m->type == NX_AM_PROMISE || m->type == NX_AM_ACCEPT || m->type == NX_AM_COMMIT) {
    nx_put32(p, m->flag);
    memcpy(p + 4, m->bits, nb);
    p += 4 + nb;
  }
  if (m->type == NX_AM_PROMISE) {
    *p++ = m->has_acc ? 1 : 0;
    if (m->has_acc) {
      nx_put32(p, m->acc_b.round);
      nx_put32(p + 4, m->acc_b.coord);
      nx_put32(p + 8, m->acc_flag);
      memcpy(p + 12, m->acc_dead, nb);
    }
  }
  return len;
}

int nx_agree_decode(const uint8_t *buf, size_t len, nx_agree_msg *m) {
  memset(m, 0, sizeof *m);
  if (!buf || len < NX_AGREE_HDR) return NEXAR_ERR_PROTOCOL;
  if (buf[0] != NX_AGREE_VERSION || buf[2] != 0 || buf[3] != 0) return NEXAR_ERR_PROTOCOL;
  m->type = buf[1];
  m->epoch = nx_get64(buf + 4);
  m->n = nx_get32(buf + 12);
  m->b.round = nx_get32(buf + 16);
  m->b.coord = nx_get32(buf + 20);
  if (m->n == 0 || m->n > NX_AGREE_MAX_N || m->b.coord >= m->n) return NEXAR_ERR_PROTOCOL;
  size_t nb = ((size_t)m->n + 7) / 8;
  size_t base = nx_agree_msg_size(m->type, 0, m->n);
  if (base == 0 || len < base) return NEXAR_ERR_PROTOCOL;
  const uint8_t *p = buf + NX_AGREE_HDR;
  if (m->type == NX_AM_PROMISE || m->type == NX_AM_ACCEPT || m->type == NX_AM_COMMIT) {
    m->flag = nx_get32(p);
    m->bits = p + 4;
    if (!bits_clean(m->bits, m->n)) return NEXAR_ERR_PROTOCOL;
    p += 4 + nb;
  }
  if (m->type == NX_AM_PROMISE) {
    if (*p > 1) return NEXAR_ERR_PROTOCOL;
    m->has_acc = *p++;
    if (len != nx_agree_msg_size(m->type, m->has_acc, m->n)) return NEXAR_ERR_PROTOCOL;
    if (m->has_acc) {
      m->acc_b.round = nx_get32(p);
      m->acc_b.coord = nx_get32(p + 4);
      m->acc_flag = nx_get32(p + 8);
      m->acc_dead = p + 12;
      if (m->acc_b.coord >= m->n || m->acc_b.round == 0 || m->acc_b.round > NX_AGREE_MAX_ROUND ||
          !bits_clean(m->acc_dead, m->n))
        return NEXAR_ERR_PROTOCOL;
    }
  } else if (len != base) {
    return NEXAR_ERR_PROTOCOL;
  }
  /* Real ballots have rounds 1 .. NX_AGREE_MAX_ROUND (never sent as 0). */
  if (m->b.round == 0 || m->b.round > NX_AGREE_MAX_ROUND) return NEXAR_ERR_PROTOCOL;
  return 0;
}
