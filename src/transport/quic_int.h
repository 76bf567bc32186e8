/* Internal to the QUIC link (quic.c: datagrams, stream I/O, timers;
 * quic_conn.c: connection setup, ngtcp2 callbacks, TLS, the connection-id
 * table and admission of handshakes). Every ngtcp2 call lives in these two
 * files. Unit tests and fuzz targets include it to set up and inspect state. */
#ifndef NX_TRANSPORT_QUIC_INT_H
#define NX_TRANSPORT_QUIC_INT_H

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "transport/quic.h"

#define NX_SCID_LEN 16
#define NX_APP_GOODBYE 0x6e78u /* application close code of a graceful departure */
#define NX_APP_GAVE_UP 0x6e79u /* we declared the receiver dead (reason says why) */
#define NX_BURST 64
#define NX_FIN_BATCH 32              /* FIN-only packets wait for this many... */
#define NX_FIN_DELAY_NS 2000000ull   /* ...or this long */
#define NX_MAX_PENDING_HANDSHAKES 16 /* in total (or the member count)... */
#define NX_MAX_PENDING_PER_SOURCE 2  /* ...and per member address */
/* A member's handshake takes milliseconds; this leaves room for loaded
 * (sanitizer) machines, where a server connection that expires under a
 * client still handshaking would strand that client. */
#define NX_SERVER_HANDSHAKE_MS 5000
#define NX_RETRY_TOKEN_NS (10 * NGTCP2_SECONDS)
#define NX_ACK_SLACK_NS 50000ull             /* idle connections: timer slack (see service) */
#define NX_STREAM_CREDIT_BATCH 16            /* stream credit returns in batches... */
#define NX_STREAM_CREDIT_DELAY_NS 1000000ull /* ...or after this long */
#define NX_ALPN "nexar/1"
#define NX_PRIO                                                                                    \
  "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"        \
  "%DISABLE_TLS13_COMPAT_MODE"

struct nx_cident {
  uint8_t cid[NGTCP2_MAX_CIDLEN];
  size_t len;
  nx_qconn *qc;
};

struct nx_quic {
  nx_quic_cfg cfg;
  nx_quic_cbs cbs;
  void *user;
  gnutls_certificate_credentials_t creds; /* NULL until nx_quic_start */
  uint8_t cluster_id[16];
  uint32_t members; /* nx_quic_start: bounds pending handshakes */
  nx_qconn *conns;  /* all connections */
  /* connection-id table: every id of every connection, unordered */
  struct nx_cident *cids;
  size_t ncids_cap;
  uint8_t retry_secret[32]; /* keys our Retry tokens */
  int retry_secret_ok;
  uint64_t refused_hs, refused_logged_ns; /* handshakes refused before any state */
  uint64_t dropped, dropped_logged_ns;    /* garbage on the socket */
  char auth_why[200];                     /* the last certificate refusal */
};

struct nx_qconn {
  nx_qconn *next;
  nx_quic *q;
  void *peer;  /* the engine's handle; NULL until bound (a server: admit) */
  int bound;   /* the engine holds this connection as its peer's */
  int hs_done; /* handshake completed */
  ngtcp2_conn *conn;
  gnutls_session_t tls;
  ngtcp2_crypto_conn_ref ref;
  struct sockaddr_storage remote;
  socklen_t remotelen;
  int is_server;
  uint32_t expect_rank;
  char name[128]; /* a client's: the address it dialed, as text */
  int dead;
  int64_t *fins; /* remote streams whose local half still needs a FIN */
  size_t nfins, capfins;
  uint64_t fins_since; /* when the oldest pending FIN was queued */
  nx_qtx **resets;
  size_t nresets, capresets;
  nx_qtx *act_head, *act_tail; /* opened messages with bytes to send */
  char proto_err[160];         /* why we refused the peer's bytes */
  int err_code;                /* with proto_err: a local failure (NOMEM), not the peer's */
  unsigned rx_since_write;     /* packets received since we last wrote */
  size_t rx_bytes_since_write; /* and their bytes: bulk traffic is ACKed at once */
  int force_write;             /* credit was returned: tell the peer now */
  uint64_t closed_streams;     /* remote streams closed, credit not yet returned */
  uint64_t closed_since;       /* when the oldest of them closed */
  uint64_t last_recovery_ts;   /* loss accounting (nexar_peer_stats.packets_lost) */
  size_t last_pto;
  uint8_t *txbuf;
};

/* quic_conn.c */
nx_qconn *nx_qc_cid_find(nx_quic *q, const uint8_t *cid, size_t len);
ngtcp2_path nx_qc_make_path(nx_qconn *qc);
/* A new server connection for an Initial from an admitted source, or NULL
 * (answered: a stateless Retry went back instead). */
nx_qconn *nx_qc_accept(nx_quic *q, const struct sockaddr *from, socklen_t fromlen,
                       const uint8_t *pkt, size_t len, int *answered);
/* Counts a refused handshake; logs at most once a second. */
void nx_qc_refused(nx_quic *q, const char *why, const struct sockaddr *from);
/* Frees a connection (dead and let go of, never authenticated, or teardown). */
void nx_qc_free(nx_qconn *qc);

#endif
