/* Hang diagnostics: each communicator keeps a ring buffer of its recent
 * operations (sequence, op, size, peer, state, timestamps). On a timeout the
 * error names the peer and step waited for, and NEXAR_DUMP_ON_TIMEOUT=1 writes
 * the ring to stderr. */
#ifndef NX_RUNTIME_OPLOG_H
#define NX_RUNTIME_OPLOG_H

#include <stdio.h>

#include "core/common.h"

#define NX_OPLOG_SIZE 64

enum nx_op_state { NX_OP_RUNNING = 0, NX_OP_DONE, NX_OP_FAILED };

typedef struct nx_oplog_entry {
  uint64_t id;    /* position in the log (never reused) */
  uint64_t seq;   /* collective sequence number (0 for point-to-point) */
  const char *op; /* static name */
  uint64_t bytes; /* payload size */
  uint32_t peer;  /* p2p peer or collective root; UINT32_MAX when none */
  uint64_t tag;
  int state;
  int rc;
  uint64_t t_start, t_end; /* monotonic ns */
  char detail[120];        /* on failure: what was pending */
} nx_oplog_entry;

typedef struct nx_oplog {
  nx_oplog_entry e[NX_OPLOG_SIZE];
  uint64_t next;
} nx_oplog;

/* Records a started operation; returns its id (under the endpoint lock). */
uint64_t nx_oplog_begin(nx_oplog *l, uint64_t seq, const char *op, uint64_t bytes, uint32_t peer,
                        uint64_t tag);
/* Records an operation that began and ended well within one call (a fast
 * path): one clock read, not two (the log's clock is coarse anyway). */
void nx_oplog_done(nx_oplog *l, uint64_t seq, const char *op, uint64_t bytes, uint32_t peer,
                   uint64_t tag);
/* Records its end; detail (may be NULL) says what was pending on failure. */
void nx_oplog_end(nx_oplog *l, uint64_t id, int rc, const char *detail);
/* Writes the ring, oldest first. */
void nx_oplog_dump(const nx_oplog *l, FILE *f, uint64_t comm_id, uint32_t rank);

#endif
