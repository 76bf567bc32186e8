/* Frame header codec. Layout (byte offsets):
 *  0 magic u16 | 2 version u8 | 3 kind u8 | 4 flags u8 | 5 coll_op u8 | 6 dtype u8
 *  7 redop u8 | 8 comm_id u64 | 16 src u32 | 20 round u32 | 24 tag u64
 * 32 segment u32 | 36 root u32 | 40 count u64 | 48 length u64 | 56 status i32
 * 60 reserved u32 (zero) */
#include "core/frame.h"
#include "core/le.h"

#include <nexar/nexar.h>
#include <string.h>

void nx_frame_encode(const nx_frame *f, uint8_t out[NX_FRAME_HDR_LEN]) {
  nx_put16(out + 0, NX_FRAME_MAGIC);
  out[2] = NX_FRAME_VERSION;
  out[3] = f->kind;
  out[4] = f->flags;
  out[5] = f->coll_op;
  out[6] = f->dtype;
  out[7] = f->redop;
  nx_put64(out + 8, f->comm_id);
  nx_put32(out + 16, f->src);
  nx_put32(out + 20, f->round);
  nx_put64(out + 24, f->tag);
  nx_put32(out + 32, f->segment);
  nx_put32(out + 36, f->root);
  nx_put64(out + 40, f->count);
  nx_put64(out + 48, f->length);
  nx_put32(out + 56, (uint32_t)f->status);
  nx_put32(out + 60, 0);
}

int nx_frame_decode(const uint8_t *in, size_t len, nx_frame *f) {
  if (len < NX_FRAME_HDR_LEN) return NEXAR_ERR_PROTOCOL;
  if (nx_get16(in) != NX_FRAME_MAGIC || in[2] != NX_FRAME_VERSION) return NEXAR_ERR_PROTOCOL;
  if (in[3] == 0 || in[3] > NX_KIND_MAX) return NEXAR_ERR_PROTOCOL;
  if (nx_get32(in + 60) != 0) return NEXAR_ERR_PROTOCOL;
  memset(f, 0, sizeof *f);
  f->kind = in[3];
  f->flags = in[4];
  f->coll_op = in[5];
  f->dtype = in[6];
  f->redop = in[7];
  f->comm_id = nx_get64(in + 8);
  f->src = nx_get32(in + 16);
  f->round = nx_get32(in + 20);
  f->tag = nx_get64(in + 24);
  f->segment = nx_get32(in + 32);
  f->root = nx_get32(in + 36);
  f->count = nx_get64(in + 40);
  f->length = nx_get64(in + 48);
  f->status = (int32_t)nx_get32(in + 56);
  if (f->length > NX_FRAME_MAX_PAYLOAD) return NEXAR_ERR_PROTOCOL;
  if (f->flags & ~(uint8_t)(NX_FLAG_LAST | NX_FLAG_RNDV)) return NEXAR_ERR_PROTOCOL;
  if ((f->flags & NX_FLAG_RNDV) && (f->status < 16 || f->status > 16 + 16 * 64 ||
                                    (f->kind != NX_KIND_P2P && f->kind != NX_KIND_COLL)))
    return NEXAR_ERR_PROTOCOL;
  return 0;
}

int nx_frame_encode_short(const nx_frame *f, uint8_t out[NX_FRAME_SHORT_LEN]) {
  if (f->flags || f->coll_op || f->dtype || f->redop || f->round || f->segment || f->root ||
      f->status || f->count || f->tag > UINT32_MAX)
    return 0;
  out[0] = NX_FRAME_SHORT_MAGIC;
  out[1] = f->kind;
  nx_put16(out + 2, 0);
  nx_put32(out + 4, (uint32_t)f->tag);
  nx_put64(out + 8, f->comm_id);
  return 1;
}

int nx_frame_decode_short(const uint8_t in[NX_FRAME_SHORT_LEN], uint32_t src, uint64_t length,
                          nx_frame *f) {
  if (in[0] != NX_FRAME_SHORT_MAGIC || in[1] == 0 || in[1] > NX_KIND_MAX || nx_get16(in + 2) ||
      length > NX_FRAME_MAX_PAYLOAD)
    return NEXAR_ERR_PROTOCOL;
  memset(f, 0, sizeof *f);
  f->kind = in[1];
  f->tag = nx_get32(in + 4);
  f->comm_id = nx_get64(in + 8);
  f->src = src;
  f->length = length;
  return 0;
}

void nx_relay_hdr_encode(const nx_relay_hdr *h, uint8_t out[NX_RELAY_HDR_LEN]) {
  out[0] = 1;
  out[1] = h->type;
  out[2] = h->ttl;
  out[3] = 0;
  nx_put32(out + 4, h->origin);
  nx_put32(out + 8, h->dest);
  nx_put32(out + 12, h->seglen);
  nx_put64(out + 16, h->seq);
  nx_put64(out + 24, h->offset);
  nx_put64(out + 32, h->total);
  nx_put16(out + 40, h->certlen);
  nx_put16(out + 42, h->siglen);
  nx_put32(out + 44, 0);
}

int nx_relay_hdr_decode(const uint8_t *in, size_t len, nx_relay_hdr *h) {
  if (len < NX_RELAY_HDR_LEN || in[0] != 1 || in[3] != 0 || nx_get32(in + 44) != 0)
    return NEXAR_ERR_PROTOCOL;
  h->type = in[1];
  h->ttl = in[2];
  h->origin = nx_get32(in + 4);
  h->dest = nx_get32(in + 8);
  h->seglen = nx_get32(in + 12);
  h->seq = nx_get64(in + 16);
  h->offset = nx_get64(in + 24);
  h->total = nx_get64(in + 32);
  h->certlen = nx_get16(in + 40);
  h->siglen = nx_get16(in + 42);
  uint64_t body = (uint64_t)h->certlen + h->seglen + h->siglen;
  if (body != len - NX_RELAY_HDR_LEN) return NEXAR_ERR_PROTOCOL;
  if (h->type == NX_RELAY_ACK || h->type == NX_RELAY_RESET)
    return body == 0 ? 0 : NEXAR_ERR_PROTOCOL;
  if (h->type != NX_RELAY_DATA || h->seglen == 0) return NEXAR_ERR_PROTOCOL;
  if (h->total < NX_FRAME_HDR_LEN || h->total > NX_FRAME_HDR_LEN + NX_FRAME_MAX_PAYLOAD ||
      h->offset > h->total || h->seglen > h->total - h->offset)
    return NEXAR_ERR_PROTOCOL;
  if ((h->offset == 0) != (h->certlen != 0)) return NEXAR_ERR_PROTOCOL;
  if (h->offset == 0 && h->seglen < NX_FRAME_HDR_LEN) return NEXAR_ERR_PROTOCOL;
  if (h->siglen == 0 && (h->offset == 0 || h->offset + h->seglen == h->total))
    return NEXAR_ERR_PROTOCOL; /* the first and the last segment are signed */
  return 0;
}
