/* The worker<->seed bootstrap channel: TCP + TLS 1.3 with (EC)DHE-PSK, the PSK derived from
 * the cluster token as HMAC-SHA256(key=token, "nexar bootstrap psk v1"). The token itself is
 * never sent: both sides prove it through the handshake, so a wrong-token joiner or a seed that
 * does not know the token fails it, and the (EC)DHE share gives forward secrecy.
 *
 * Every step (connect, handshake, send, recv) honours its timeout_ms deadline: the socket is
 * driven with non-blocking send/recv calls and poll(), so a slow or malicious peer can never
 * hold a caller longer than that (except name resolution, which getaddrinfo does blocking).
 * A channel is used by one thread at a time. */
#ifndef NX_CLUSTER_CHAN_H
#define NX_CLUSTER_CHAN_H

#include <stddef.h>
#include <stdint.h>

#define NX_CHAN_MAX_MSG (1u << 20) /* largest message body, 1 MiB */

typedef struct nx_chan nx_chan;

/* Client: resolve host:port ("[v6]:port" too), connect, TLS-PSK handshake.
 * Wrong token -> NEXAR_ERR_AUTH; refused/unreachable -> NEXAR_ERR_IO;
 * deadline -> NEXAR_ERR_TIMEOUT; empty token -> NEXAR_ERR_INVALID_ARGUMENT. */
int nx_chan_connect(nx_chan **out, const char *hostport, const char *token, uint32_t timeout_ms);

/* Listener: bind + listen TCP on host:port (port 0 = ephemeral; host "0.0.0.0", "::" or a
 * name). Writes the bound "host:port" into bound (if cap > 0): the host as given when it was a
 * wildcard, else the numeric address actually bound ("[v6]:port" for IPv6). *fd is the
 * listening socket (close-on-exec, blocking). */
int nx_chan_listen(int *fd, const char *hostport, char *bound, size_t cap);

/* Server side of the handshake on an accepted fd; takes ownership of fd even on failure.
 * Wrong token -> NEXAR_ERR_AUTH; silent client -> NEXAR_ERR_TIMEOUT. */
int nx_chan_server(nx_chan **out, int fd, const char *token, uint32_t timeout_ms);

/* One message = u32 LE length + bytes, length <= NX_CHAN_MAX_MSG. A send that fails or times
 * out leaves the channel unusable. recv rejects larger declared lengths with
 * NEXAR_ERR_PROTOCOL before allocating; *msg is malloc'd (free()). A recv that times out keeps
 * what it already read, so the next recv continues the same message. The peer closing gives
 * NEXAR_ERR_IO. */
int nx_chan_send(nx_chan *ch, const void *msg, size_t len, uint32_t timeout_ms);
int nx_chan_recv(nx_chan *ch, void **msg, size_t *len, uint32_t timeout_ms);

/* Non-blocking: 1 if the peer closed (or the channel failed), 0 if it looks open. */
int nx_chan_closed(nx_chan *ch);

/* Numeric local IP of the connected socket ("10.0.0.2", "fd00::1"; v4-mapped shown as v4):
 * the address of the interface that reaches the peer. */
int nx_chan_local_ip(nx_chan *ch, char *buf, size_t cap);
/* "ip:port" ("[v6]:port") of the peer, for log lines. */
int nx_chan_peer_addr(nx_chan *ch, char *buf, size_t cap);

/* Sends close_notify if that can be done without waiting, then closes. NULL is a no-op. */
void nx_chan_del(nx_chan *ch);

#endif
