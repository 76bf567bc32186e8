/* The fixed binary header that starts every message on every transport.
 * 64 bytes, little-endian, validated before anything is allocated. */
#ifndef NX_CORE_FRAME_H
#define NX_CORE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define NX_FRAME_MAGIC 0x584eu /* "NX" */
#define NX_FRAME_VERSION 1u
#define NX_FRAME_HDR_LEN 64u
/* Largest payload a peer may declare: 64 GiB. Bigger is a protocol error. */
#define NX_FRAME_MAX_PAYLOAD (64ull << 30)

/* What a frame carries. Control kinds never share a queue with user data. */
enum nx_frame_kind {
  NX_KIND_P2P = 1,        /* tagged user message: tag = user tag */
  NX_KIND_COLL = 2,       /* collective data: tag = sequence, round, segment, signature */
  NX_KIND_RPC_REQ = 3,    /* tag = request id, round = fn_id */
  NX_KIND_RPC_RESP = 4,   /* tag = request id, status = result code */
  NX_KIND_HEARTBEAT = 5,  /* liveness, consumed by the engine */
  NX_KIND_ABORT = 6,      /* comm aborted by the sender */
  NX_KIND_COLL_FAIL = 7,  /* collective `tag` failed on the sender (status = code) */
  NX_KIND_RNDV_DONE = 8,  /* receiver read rendezvous `tag` (status = result) */
  NX_KIND_SHM_HELLO = 9,  /* same-host probe: pid, address and value of a cookie */
  NX_KIND_SHM_OK = 10,    /* the sender can read our memory: rendezvous allowed */
  NX_KIND_LANE = 11,      /* same-host lane ping (status 0) / pong (1): lane datagrams only */
  NX_KIND_REVOKE = 12,    /* comm revoked (flooded: forwarded once by each member); no payload */
  NX_KIND_AGREE = 13,     /* agreement message (proto/agree.h) of instance `tag` of comm */
  NX_KIND_RELAY = 14,     /* a relayed segment or its acknowledgement: nx_relay_hdr + body */
  NX_KIND_PEER_GONE = 15, /* sparse: rank `tag` died (status 1), left (2), is closing (3) */
  NX_KIND_RNDV_DATA = 16, /* a piece of rendezvous `tag` at offset `count`: same-host rings only */
  NX_KIND_MAX = 16
};

enum nx_frame_flags {
  NX_FLAG_LAST = 1u << 0, /* last segment of a chunked message */
  NX_FLAG_RNDV = 1u << 1, /* same-host rendezvous: the payload on the wire is a
                           * descriptor of `status` bytes; `length` is the
                           * message's, read with process_vm_readv */
};

typedef struct nx_frame {
  uint8_t kind;     /* nx_frame_kind */
  uint8_t flags;    /* nx_frame_flags */
  uint8_t coll_op;  /* collective operation id (collectives) */
  uint8_t dtype;    /* nexar_dtype (collectives) */
  uint8_t redop;    /* nexar_op (collectives) */
  uint64_t comm_id; /* communicator; 0 = root */
  uint32_t src;     /* sender's rank in the root communicator */
  uint64_t tag;     /* p2p tag, collective sequence or RPC request id */
  uint32_t round;   /* collective round, RPC fn_id */
  uint32_t segment; /* collective segment */
  uint32_t root;    /* collective root */
  int32_t status;   /* result code (RPC responses, failures) */
  uint64_t count;   /* collective element count */
  uint64_t length;  /* payload bytes after the header */
} nx_frame;

/* Writes the 64-byte header. */
void nx_frame_encode(const nx_frame *f, uint8_t out[NX_FRAME_HDR_LEN]);
/* Parses and validates a header; 0 or NEXAR_ERR_PROTOCOL (bad magic, version,
 * kind, length above NX_FRAME_MAX_PAYLOAD, non-zero reserved bytes). */
int nx_frame_decode(const uint8_t *in, size_t len, nx_frame *f);

/* The short header: 16 bytes, little-endian, for a frame whose only
 * fields are its kind, communicator, a tag below 2^32, its sender and its
 * length, as most point-to-point messages are. Only where the sender and
 * the length are known otherwise: a same-host ring (core/ring.h) is one
 * peer's, and its record says how long the payload is. An 8-byte message
 * then fits a cache line with its ring prefix (64-byte header: two).
 *  0 magic u8 (NX_FRAME_SHORT_MAGIC) | 1 kind u8 | 2 reserved u16 (zero)
 *  4 tag u32 | 8 comm_id u64 */
#define NX_FRAME_SHORT_LEN 16u
#define NX_FRAME_SHORT_MAGIC 0xf1u /* never a full header's first byte (0x4e) */
/* Writes f's short header if f has one (1), else nothing (0). */
int nx_frame_encode_short(const nx_frame *f, uint8_t out[NX_FRAME_SHORT_LEN]);
/* Parses a short header from src with `length` payload bytes; 0 or
 * NEXAR_ERR_PROTOCOL (magic, kind, reserved bytes, length). */
int nx_frame_decode_short(const uint8_t in[NX_FRAME_SHORT_LEN], uint32_t src, uint64_t length,
                          nx_frame *f);

/* The relay header that starts an NX_KIND_RELAY payload (runtime/relay.c).
 * 48 bytes, little-endian:
 *  0 version u8 (1) | 1 type u8 | 2 ttl u8 | 3 flags u8 (0) | 4 origin u32 | 8 dest u32
 * 12 seglen u32 | 16 seq u64 | 24 offset u64 | 32 total u64 | 40 certlen u16 | 42 siglen u16
 * 44 reserved u32 (zero)
 * DATA: certlen bytes of the origin's certificate (offset 0 only, else 0), seglen bytes of the
 * message (its 64-byte frame header first, then payload) from offset, then siglen bytes of the
 * origin's signature (the first and the last segment of a message; 0 for the others). ACK: no
 * body; offset = bytes of message seq the destination has. RESET (origin to destination): no
 * body; the origin gave message seq up after offset bytes. */
#define NX_RELAY_HDR_LEN 48u
enum {
  NX_RELAY_DATA = 1,
  NX_RELAY_ACK = 2,
  NX_RELAY_RESET = 3 /* the origin gave message seq up */
};
typedef struct nx_relay_hdr {
  uint8_t type, ttl;
  uint32_t origin, dest, seglen;
  uint64_t seq, offset, total;
  uint16_t certlen, siglen;
} nx_relay_hdr;
void nx_relay_hdr_encode(const nx_relay_hdr *h, uint8_t out[NX_RELAY_HDR_LEN]);
/* Parses a relay payload of len bytes: the header, and that the body lengths add up to len;
 * DATA needs 1 <= seglen, offset + seglen <= total, total >= NX_FRAME_HDR_LEN, a signature,
 * and a certificate exactly at offset 0; ACK needs an empty body. 0 or NEXAR_ERR_PROTOCOL. */
int nx_relay_hdr_decode(const uint8_t *in, size_t len, nx_relay_hdr *h);

#endif
