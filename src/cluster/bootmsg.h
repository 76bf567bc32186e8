/* Bootstrap messages exchanged between a worker and the seed over the bootstrap channel
 * (src/cluster/chan.h), and their strict codec.
 *
 * Wire layout (all integers little-endian):
 *   u8 type, u32 version, then per type:
 *   HELLO:   u32 requested_rank, u32 world_size, u32 topology, u32 topology_degree,
 *            str8 listen_addr, str8 hostname, blob csr
 *   WELCOME: u32 rank, u32 world_size, 16 bytes cluster_id, blob ca_cert, blob cert,
 *            world_size x (str8 addr, str8 host)
 *   REFUSE:  i32 code, str8 reason
 *   FORMED:  nothing (worker -> seed: my mesh is up, the seed may forget me)
 *   LOST:    u32 rank, str8 reason (seed -> worker: that rank died before it
 *            reported FORMED; the formation fails at once)
 *   A WELCOME entry with an empty addr is a member id outside the view (a
 *   joiner's table: ids of members that left or were never admitted).
 * Elastic membership (elasticmsg.c), after formation:
 *   WAITING:    nothing (seed -> members: joiners are queued; seed -> a joiner
 *               of a formed world: you are queued, VIEW and WELCOME follow
 *               when a checkpoint takes you)
 *   ADMIT_REQ:  u64 comm_id, u64 epoch, u32 old_world, u32 max_new, u32 n,
 *               n x (u32 id, str8 addr, str8 host) (coordinator -> seed: the
 *               staying members of the next view, and room for max_new joiners)
 *   ADMIT_LIST: u32 n, n x (u32 id, str8 addr, str8 host) (seed -> coordinator:
 *               the joiners it offered, in admission order)
 *   VIEW:       u64 comm_id, u64 epoch, u32 old_world, u32 nstay, u32 n, n x u32
 *               id (seed -> joiner, before its WELCOME: the view it is offered,
 *               stayers then joiners; comm_id is the predecessor's)
 * where str8 = u8 length + bytes (no NUL), blob = u32 length + bytes. Strings use one-byte
 * lengths because every string field is shorter than 256 bytes; this keeps a WELCOME for a big
 * world small. The encoding is canonical: decode(encode(m)) == m and encode(decode(b)) == b.
 *
 * Decoders validate the whole buffer before allocating anything; any malformed input gives
 * NEXAR_ERR_PROTOCOL and leaves *m zeroed with nothing allocated. Encoders apply the same rules
 * and give NEXAR_ERR_INVALID_ARGUMENT for a message that could not be decoded. */
#ifndef NX_CLUSTER_BOOTMSG_H
#define NX_CLUSTER_BOOTMSG_H

#include <stddef.h>
#include <stdint.h>

#define NX_BOOT_VERSION 1
#define NX_ADDR_MAX 128 /* "host:port" incl NUL */
#define NX_HOST_MAX 64
#define NX_BOOT_BLOB_MAX (16u * 1024u) /* CSR, CA cert and cert */
#define NX_BOOT_WORLD_MAX 65536u
#define NX_BOOT_ANY_RANK UINT32_MAX

enum {
  NX_BOOT_HELLO = 1,
  NX_BOOT_WELCOME = 2,
  NX_BOOT_REFUSE = 3,
  NX_BOOT_FORMED = 4,
  NX_BOOT_LOST = 5,
  NX_BOOT_WAITING = 6,
  NX_BOOT_ADMIT_REQ = 7,
  NX_BOOT_ADMIT_LIST = 8,
  NX_BOOT_VIEW = 9,
  NX_BOOT_LAST = NX_BOOT_VIEW
};

typedef struct nx_hello {
  uint32_t version;        /* NX_BOOT_VERSION (0 is encoded as NX_BOOT_VERSION) */
  uint32_t requested_rank; /* NX_BOOT_ANY_RANK = any */
  uint32_t world_size;     /* 0 = unknown */
  uint32_t topology, topology_degree;
  char listen_addr[NX_ADDR_MAX]; /* where peers reach this worker's QUIC endpoint */
  char hostname[NX_HOST_MAX];
  uint8_t *csr; /* <= NX_BOOT_BLOB_MAX */
  size_t csr_len;
} nx_hello;

typedef struct nx_welcome {
  uint32_t rank, world_size;
  uint8_t cluster_id[16];
  uint8_t *ca_cert; /* <= NX_BOOT_BLOB_MAX */
  size_t ca_len;
  uint8_t *cert; /* <= NX_BOOT_BLOB_MAX */
  size_t cert_len;
  char (*addrs)[NX_ADDR_MAX]; /* world_size entries, index = rank */
  char (*hosts)[NX_HOST_MAX]; /* world_size entries */
} nx_welcome;

typedef struct nx_refuse {
  int32_t code; /* a NEXAR_ERR_* code (negative) */
  char reason[256];
} nx_refuse;

typedef struct nx_lost {
  uint32_t rank;
  char reason[256];
} nx_lost;

/* A member (or joiner) and where it is reached. */
typedef struct nx_member_addr {
  uint32_t id; /* member id (root rank), < NX_BOOT_WORLD_MAX */
  char addr[NX_ADDR_MAX];
  char host[NX_HOST_MAX];
} nx_member_addr;

typedef struct nx_admit_req {
  uint64_t comm_id, epoch; /* the current view's id; the next view's epoch */
  uint32_t old_world, max_new;
  uint32_t n; /* stayers, in rank order; 1 <= n <= NX_BOOT_WORLD_MAX */
  nx_member_addr *m;
} nx_admit_req;

typedef struct nx_admit_list {
  uint32_t n; /* 0 <= n <= NX_BOOT_WORLD_MAX */
  nx_member_addr *m;
} nx_admit_list;

typedef struct nx_view_msg {
  uint64_t comm_id, epoch;
  uint32_t old_world, nstay, n; /* 1 <= nstay < n <= NX_BOOT_WORLD_MAX */
  uint32_t *ids;                /* distinct, < NX_BOOT_WORLD_MAX */
} nx_view_msg;

/* Encoders: *out is malloc'd (free with free()). */
int nx_hello_encode(const nx_hello *m, uint8_t **out, size_t *len);
int nx_hello_decode(const uint8_t *in, size_t len, nx_hello *m); /* allocates csr */
void nx_hello_free(nx_hello *m);
int nx_welcome_encode(const nx_welcome *m, uint8_t **out, size_t *len);
int nx_welcome_decode(const uint8_t *in, size_t len, nx_welcome *m); /* allocates all pointers */
void nx_welcome_free(nx_welcome *m);
int nx_refuse_encode(const nx_refuse *m, uint8_t **out, size_t *len);
int nx_refuse_decode(const uint8_t *in, size_t len, nx_refuse *m);
int nx_formed_encode(uint8_t **out, size_t *len);
int nx_formed_decode(const uint8_t *in, size_t len);
int nx_lost_encode(const nx_lost *m, uint8_t **out, size_t *len);
int nx_lost_decode(const uint8_t *in, size_t len, nx_lost *m);
int nx_waiting_encode(uint8_t **out, size_t *len);
int nx_waiting_decode(const uint8_t *in, size_t len);
int nx_admit_req_encode(const nx_admit_req *m, uint8_t **out, size_t *len);
int nx_admit_req_decode(const uint8_t *in, size_t len, nx_admit_req *m); /* allocates m->m */
void nx_admit_req_free(nx_admit_req *m);
int nx_admit_list_encode(const nx_admit_list *m, uint8_t **out, size_t *len);
int nx_admit_list_decode(const uint8_t *in, size_t len, nx_admit_list *m); /* allocates m->m */
void nx_admit_list_free(nx_admit_list *m);
int nx_view_encode(const nx_view_msg *m, uint8_t **out, size_t *len);
int nx_view_decode(const uint8_t *in, size_t len, nx_view_msg *m); /* allocates ids */
void nx_view_free(nx_view_msg *m);
/* The type byte of a message (NX_BOOT_*), or NEXAR_ERR_PROTOCOL. */
int nx_bootmsg_type(const uint8_t *in, size_t len);

#endif
