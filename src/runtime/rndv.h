/* Rendezvous internals shared by the same-host path (rndv.c) and the
 * inter-host TCP path (bulk.c). All under ep->mu. */
#ifndef NX_RUNTIME_RNDV_H
#define NX_RUNTIME_RNDV_H

#include "runtime/engine.h"

/* A large send waiting for its receiver. */
struct nx_rndv {
  nx_rndv *next;
  uint64_t id;
  nexar_request *req;
  nx_peer *peer;
  int cancel_sent;
  int writing;      /* TCP: a bulk writer is sending from the buffer */
  nexar_iovec *iov; /* the payload: TCP, and same-host streams (readers by
                     * process_vm_readv use the descriptor's addresses) */
  size_t niov;
  uint64_t len;
  int tcp;        /* the descriptor asked for the bulk TCP path */
  int stream;     /* same host: its reader asked for the bytes through the ring */
  uint64_t sent;  /* streamed: bytes in the ring */
  nx_rndv *snext; /* ep->streams, oldest first */
};

/* The pending send to p with id, or NULL. */
nx_rndv *nx_rndv_find_locked(nx_ep *ep, nx_peer *p, uint64_t id);
/* Unlinks rv and completes its request. */
void nx_rndv_finish_locked(nx_ep *ep, nx_rndv *rv, int rc, const char *why);
/* Sends a rendezvous control frame (RNDV_DONE answer) to p. */
void nx_rndv_answer_locked(nx_ep *ep, nx_peer *p, uint64_t id, int32_t status);

/* ---- bulk.c: TCP between hosts */
/* Starts the listener (when the config allows a bulk path). */
int nx_bulk_start(nx_ep *ep);
/* Stops the listener and every stream, joining their threads (no lock held). */
void nx_bulk_stop(nx_ep *ep);
/* The hello of a peer on another host arrived: port and the secret it
 * expects from us; dial it if we are the lower rank. */
void nx_bulk_on_hello_locked(nx_ep *ep, nx_peer *p, uint16_t port, const uint8_t secret[32]);
/* A matched descriptor of a TCP rendezvous: ask the sender for the bytes;
 * the receive completes when they arrived. m is freed then. */
void nx_bulk_pull_locked(nx_ep *ep, nx_msg *m, nx_recv *r, uint64_t id);
/* The peer is dead or gone: wake the stream's threads, which fail its work. */
void nx_bulk_peer_down_locked(nx_ep *ep, nx_peer *p);

#endif
