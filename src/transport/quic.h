/* The only module that calls ngtcp2 (quic.c, quic_conn.c): QUIC connections of one endpoint.
 * Progress thread only. A move to ngtcp2 1.x touches this module alone. */
#ifndef NX_TRANSPORT_QUIC_H
#define NX_TRANSPORT_QUIC_H

#include "runtime/engine.h"

/* The congestion controller named v (NEXAR_QUIC_CC: reno|cubic|bbr|bbr2). */
int nx_quic_cc_by_name(const char *v, int *out);
/* Client connection to peer p (the lower rank dials the higher one). */
int nx_qconn_client_new(nx_ep *ep, nx_peer *p);
/* Handles one received datagram: routes it by connection id, accepting new
 * connections from authenticated lower ranks. */
void nx_quic_on_datagram(nx_ep *ep, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                         size_t len);
/* Runs timers that are due and writes what is pending on every connection;
 * returns the next deadline (ns, UINT64_MAX if none). */
uint64_t nx_quic_service(nx_ep *ep, uint64_t now);
/* Returns credit for n consumed bytes of stream sid (boost adds extra window). */
void nx_qconn_extend(nx_qconn *qc, int64_t sid, uint64_t n, uint64_t boost);
/* The peer is dead: stop writing and forget queued messages (the engine
 * frees them); the connection is freed by the next service pass. With why,
 * the peer is told in a CONNECTION_CLOSE (NULL: it left or closed itself). */
void nx_qconn_abandon(nx_qconn *qc, const char *why);
/* Sends CONNECTION_CLOSE and frees every connection. */
void nx_quic_close_all(nx_ep *ep);
/* Frees a connection (its peer is dead or it never authenticated). */
void nx_qconn_free(nx_ep *ep, nx_qconn *qc);
/* Queues a reset of m's stream (cancelled send); the request completes once
 * ngtcp2 no longer references the buffer. */
void nx_qconn_reset(nx_qconn *qc, nx_txmsg *m);

#endif
