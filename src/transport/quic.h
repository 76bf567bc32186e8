/* The QUIC link: QUIC connections of one endpoint over one UDP socket
 * (quic.c: datagrams, stream I/O, timers; quic_conn.c: connection setup,
 * TLS, the connection-id table, admission). Every ngtcp2 call lives in this
 * module; a move to ngtcp2 1.x touches it alone. It includes no runtime
 * header: it reports upward only through the callbacks the engine registers
 * (nx_quic_cbs), and what it passes up are opaque handles.
 *
 * Who owns what.
 *  - The link (nx_quic): every connection (nx_qconn), the connection-id
 *    table, the Retry secret, handshake admission state (pending bounds) and
 *    refusal counters, the count of dropped datagrams, the last certificate
 *    refusal (nx_quic_auth_why), the congestion controller, each
 *    connection's send buffer, and each connection's queue of bytes to
 *    write: the messages whose stream is open and not fully written (written
 *    round-robin), the reverse-half FINs of remote streams, stream resets,
 *    and the batching of stream credit.
 *  - The engine: peers (a connection carries a `void *peer` handle once it
 *    is bound to one), messages (it embeds an nx_qtx in each and gets the
 *    nx_qtx back in callbacks), the queues of messages still waiting for a
 *    stream and the policy of which one goes next (tx_next: runtime messages
 *    first; user point-to-point data leaves connection credit and streams to
 *    them), who dials whom (proto/route), which ranks are members and from
 *    which addresses, and what a stream's bytes mean (frames, matching, the
 *    unexpected-data budget, when credit goes back: nx_qconn_extend).
 *  A connection is bound to a peer from the dial (client) or from admit()
 *  (server: the certificate named a rank the engine accepted) until the
 *  engine lets go (nx_qconn_abandon, nx_qconn_unbind) or the link reports
 *  dead()/departed(). Only bound connections report connection events.
 *
 * Threads: the link is not thread-safe (neither is ngtcp2). Every call into
 * it is made under the engine's endpoint lock by the thread that drives the
 * engine at that moment (its progress thread, or an application thread that
 * waits or sends under the lock); callbacks run inside those calls, on that
 * thread, under that lock. A callback may call nx_qconn_extend,
 * nx_qconn_reset, nx_qconn_abandon and nx_qconn_unbind (a dead() callback
 * typically abandons that very connection), but never re-enters
 * nx_quic_on_datagram, nx_quic_service, nx_quic_close_all or nx_quic_del. */
#ifndef NX_TRANSPORT_QUIC_H
#define NX_TRANSPORT_QUIC_H

#include <gnutls/gnutls.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/common.h"
#include "core/frame.h"
#include "transport/udp.h"

typedef struct nx_quic nx_quic;
typedef struct nx_qconn nx_qconn;
typedef struct nx_qtx nx_qtx;

/* One outgoing message = one bidirectional stream: hdr, then the iov bytes,
 * then FIN. Embedded by the engine in its own message record. The engine
 * fills hdr, iov, niov, total and holdable and sets sid = -1; from tx_next
 * until tx_done the link owns next, sid, sent, in_queue and updates acked
 * through tx_acked. */
struct nx_qtx {
  nx_qtx *next; /* the engine's wait queue before tx_next; the link's after */
  int64_t sid;  /* -1 until the link opens its stream */
  uint8_t hdr[NX_FRAME_HDR_LEN];
  nexar_iovec *iov;
  size_t niov;
  uint64_t total; /* header + payload */
  uint64_t sent;  /* handed to ngtcp2 */
  uint64_t acked; /* acknowledged prefix (tx_acked) */
  int holdable;   /* a receiver may hold it over its budget: the reserve rule */
  int in_queue;   /* on the link's queue of opened messages */
};

/* Fixed parameters of the link, filled by the engine before nx_quic_new. */
typedef struct nx_quic_cfg {
  nx_udp *udp;              /* the socket every connection uses (borrowed) */
  int cc_algo;              /* nx_quic_cc_by_name */
  uint64_t conn_window;     /* connection flow-control window (fixed) */
  uint64_t conn_param;      /* its part in the transport parameters; the rest
                               is granted when the handshake completes */
  uint64_t conn_reserve;    /* below this connection credit a holdable
                               message sends at most its header (the oldest
                               one flows while more than half is left) */
  uint64_t stream_window;   /* per stream, before a receive extends it */
  uint64_t max_streams;     /* bidirectional streams the peer may open */
  uint64_t handshake_ms;    /* client handshake timeout (a server's: at most 5 s) */
  uint64_t idle_timeout_ms; /* QUIC idle close: a backstop to the heartbeats */
} nx_quic_cfg;

/* What the link reports upward. user is nx_quic_new's; peer is the handle
 * the engine bound the connection to; stream is stream_open's result. */
typedef struct nx_quic_cbs {
  /* Admission. member_addr: 1 if a handshake may come from this source (a
   * member's advertised address); asked before any state exists. admit: a
   * server connection's certificate names rank (chained to the cluster CA):
   * 0 and *peer set binds it; -1 refuses the handshake, and a reason written
   * to why (cap bytes) is recorded and logged as a certificate refusal (an
   * empty why: the engine logged it). */
  int (*member_addr)(void *user, const struct sockaddr *from);
  int (*admit)(void *user, nx_qconn *qc, uint32_t rank, void **peer, char *why, size_t cap);
  /* A bound connection: its handshake completed; it failed (the link
   * already stopped it; code PEER_LOST, AUTH, PROTOCOL or NOMEM; why names
   * the reason); the peer closed it gracefully after delivering everything;
   * a datagram arrived on it (now: its time); its path statistics after a
   * write (smoothed RTT, loss events since the last report). */
  void (*up)(void *user, void *peer);
  void (*dead)(void *user, void *peer, int code, const char *why);
  void (*departed)(void *user, void *peer);
  void (*heard)(void *user, void *peer, uint64_t now);
  void (*path_stats)(void *user, void *peer, double srtt_us, uint64_t lost);
  /* Remote streams. stream_open: a handle for the stream's bytes, NULL to
   * refuse it (the connection closes). stream_data: bytes in order (fin:
   * the last); *credit_now: stream credit to return now; *conn_held: bytes
   * whose connection credit the engine withholds (returned later with
   * nx_qconn_extend, sid < 0); nonzero: the bytes are refused (a protocol
   * violation or NOMEM, with nexar_last_error) and the connection closes.
   * stream_close: the stream is done (the handle is freed); nonzero: a
   * local failure (NEXAR_ERR_NOMEM) that closes the connection. */
  void *(*stream_open)(void *user, void *peer, int64_t sid);
  int (*stream_data)(void *user, void *stream, const uint8_t *data, size_t len, int fin,
                     uint64_t *credit_now, uint64_t *conn_held);
  int (*stream_close)(void *user, void *stream);
  /* Writing. tx_waiting: 1 while the engine has messages for peer that wait
   * for a stream. tx_next: takes the next of them off the engine's queue,
   * given the connection credit and streams left (NULL: none may go now;
   * the engine answers NULL when no stream is left); tx_return: the link
   * could not open its stream: back to the front of its queue. tx_acked:
   * bytes [offset, offset+len) were acknowledged. tx_done: the link no
   * longer references m (fully acknowledged, reset, or its stream closed):
   * it counts as acknowledged in full and belongs to the engine again. */
  int (*tx_waiting)(void *user, void *peer);
  nx_qtx *(*tx_next)(void *user, void *peer, uint64_t data_left, uint64_t streams_left);
  void (*tx_return)(void *user, void *peer, nx_qtx *m);
  void (*tx_acked)(void *user, nx_qtx *m, uint64_t offset, uint64_t len);
  void (*tx_done)(void *user, nx_qtx *m);
} nx_quic_cbs;

/* The congestion controller named v (NEXAR_QUIC_CC: reno|cubic|bbr|bbr2;
 * NULL or empty: bbr2): 0, or NEXAR_ERR_INVALID_ARGUMENT. */
int nx_quic_cc_by_name(const char *v, int *out);
/* A link with no connections: 0, or NEXAR_ERR_NOMEM. cfg and cbs are
 * copied. Handshakes are refused until nx_quic_start. */
int nx_quic_new(nx_quic **out, const nx_quic_cfg *cfg, const nx_quic_cbs *cbs, void *user);
/* Closes every connection (nx_quic_close_all) and frees the link. NULL: no-op. */
void nx_quic_del(nx_quic *q);
/* The identity handshakes check: TLS credentials (borrowed; the engine
 * frees them after nx_quic_del) and the cluster id certificates must carry;
 * members: how many may dial us at once (handshakes in progress are bounded
 * by the larger of this and 16, and by 2 per source address). */
void nx_quic_start(nx_quic *q, gnutls_certificate_credentials_t creds, const uint8_t cluster_id[16],
                   uint32_t members);
/* The member count grew (members admitted after formation). */
void nx_quic_set_members(nx_quic *q, uint32_t members);
/* A client connection to the member rank at addr (name: its address as
 * text, for messages), bound to peer: 0, NEXAR_ERR_NOMEM, or NEXAR_ERR_TLS
 * (no connection could be made; nexar_last_error says why). */
int nx_quic_dial(nx_quic *q, void *peer, uint32_t rank, const struct sockaddr *addr,
                 socklen_t addrlen, const char *name, nx_qconn **out);
/* Handles one received datagram: routes it by connection id; an Initial
 * from a member's address goes through admission (Retry, bounds). Anything
 * else is dropped and counted (nx_quic_dropped). pkt may be decrypted in place. */
void nx_quic_on_datagram(nx_quic *q, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                         size_t len);
/* Runs timers that are due and writes what is pending on every connection;
 * frees dead connections the engine let go of. Returns the next deadline
 * (ns, UINT64_MAX if none). */
uint64_t nx_quic_service(nx_quic *q, uint64_t now);
/* Returns credit for n consumed bytes of stream sid (boost adds extra
 * window); sid < 0: connection credit only. NULL or dead qc: no-op. */
void nx_qconn_extend(nx_qconn *qc, int64_t sid, uint64_t n, uint64_t boost);
/* The engine lets go of qc (its peer is dead or left): stop writing and
 * forget the opened messages (the engine frees them); the connection is
 * freed by the next service pass. With reason, the peer is told in a
 * CONNECTION_CLOSE (NULL: it left or closed itself). NULL qc: no-op. */
void nx_qconn_abandon(nx_qconn *qc, const char *reason);
/* The engine replaced qc by a newer connection of the same peer (a
 * reconnect while qc was half-open): qc is no longer bound and reports
 * nothing more; it lives until its handshake or timer fails. */
void nx_qconn_unbind(nx_qconn *qc);
/* Queues a reset of m's open stream (a cancelled send); tx_done follows
 * once ngtcp2 no longer references the buffer. NULL or dead qc: no-op. */
void nx_qconn_reset(nx_qconn *qc, nx_qtx *m);
/* Sends CONNECTION_CLOSE (goodbye) on every connection and frees them all,
 * bound or not, without callbacks: the engine forgets its handles. */
void nx_quic_close_all(nx_quic *q);
/* The last certificate refusal ("" if none), for error messages. */
const char *nx_quic_auth_why(const nx_quic *q);
/* Datagrams dropped because they were not QUIC packets of this cluster. */
uint64_t nx_quic_dropped(const nx_quic *q);

#endif
