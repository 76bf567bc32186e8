/* Bulk byte streams between hosts: one TCP connection per peer pair, mutual
 * TLS 1.3 with the cluster certificates (or plaintext on trusted fabrics).
 * Blocking I/O, one reading and one writing thread per stream (GnuTLS allows
 * exactly that sharing of a session); nx_tcp_shutdown wakes both. */
#ifndef NX_TRANSPORT_TCP_H
#define NX_TRANSPORT_TCP_H

#include <gnutls/gnutls.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

typedef struct nx_tcp nx_tcp;

/* Listens on host (the endpoint's UDP address) with an ephemeral port; the
 * listening socket is non-blocking. */
int nx_tcp_listen(const struct sockaddr *local, socklen_t len, int *fd, uint16_t *port);
/* Waits up to timeout_ms for a connection: 0 with *fd (blocking) and its
 * source address in *peer, 1 if none came (or the process is out of
 * descriptors for now), -1 once the listener was shut down. */
int nx_tcp_accept(int lfd, int *fd, struct sockaddr_storage *peer, int timeout_ms);
/* 1 if a and b hold the same IP address (ports ignored; an IPv4-mapped IPv6
 * address equals its IPv4 form). */
int nx_tcp_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
/* 1 if a and b are both IPv4 (plain or v4-mapped) or both IPv6. */
int nx_tcp_same_family(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* Identity for the TLS handshake (NULL creds: plaintext). */
typedef struct nx_tcp_id {
  gnutls_certificate_credentials_t creds;
  const uint8_t *cluster_id; /* 16 bytes */
} nx_tcp_id;

/* A stream on a new socket of that family (AF_INET/AF_INET6), or on an
 * accepted one (takes fd). The caller frees it with nx_tcp_free, also after a
 * failed connect or handshake; nx_tcp_shutdown from another thread aborts a
 * connect, a handshake or any blocked read or write. */
nx_tcp *nx_tcp_open(int family);
/* Best effort: the connection leaves from this IP (any port), so the peer's
 * listener, which takes only peer addresses, sees the address we advertise. */
void nx_tcp_bind_source(nx_tcp *t, const struct sockaddr_storage *ip);
nx_tcp *nx_tcp_wrap(int fd);
/* Connects to addr with port and runs the client handshake; with TLS, the
 * peer's certificate must name expect_rank. timeout_ms bounds each step. */
int nx_tcp_connect(nx_tcp *t, const struct sockaddr *addr, socklen_t len, uint16_t port,
                   const nx_tcp_id *id, uint32_t expect_rank, int timeout_ms);
/* Server handshake. With TLS, *rank is the rank the client's certificate
 * names; in plaintext it is UINT32_MAX. */
int nx_tcp_server(nx_tcp *t, const nx_tcp_id *id, uint32_t *rank, int timeout_ms);
/* Socket timeouts for reads and writes (0: none). */
void nx_tcp_set_timeout(nx_tcp *t, int ms);

/* Whole reads and writes; 0, or -1 with nexar_last_error() set (EOF: *eof). */
int nx_tcp_read(nx_tcp *t, void *buf, size_t n, int *eof);
int nx_tcp_writev(nx_tcp *t, const struct iovec *iov, size_t niov);
/* Wakes blocked readers and writers; the stream is dead afterwards. */
void nx_tcp_shutdown(nx_tcp *t);
void nx_tcp_free(nx_tcp *t);
int nx_tcp_is_tls(const nx_tcp *t);

#endif
