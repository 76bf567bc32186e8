/* UDP socket for one endpoint: batching (GSO/GRO, sendmmsg), socket buffers,
 * and the test-only impairment hook (NEXAR_TEST_IMPAIR). Progress thread only. */
#ifndef NX_TRANSPORT_UDP_H
#define NX_TRANSPORT_UDP_H

#include <stdint.h>
#include <sys/socket.h>

#include "core/common.h"

typedef struct nx_impair nx_impair;

typedef struct nx_udp {
  int fd;
  int family;
  int gso; /* kernel accepts UDP_SEGMENT */
  int gro; /* UDP_GRO enabled on receive */
  struct sockaddr_storage local;
  socklen_t locallen;
  nx_impair *imp; /* NULL unless NEXAR_TEST_IMPAIR is set */
  uint64_t tx_packets, rx_packets, imp_dropped;
  uint8_t *rxbuf;
} nx_udp;

#define NX_UDP_RX_BATCH 32 /* datagrams per recvmmsg */

typedef void (*nx_udp_rx_fn)(void *ud, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                             size_t len);

/* Binds host (NULL or "" = any, IPv4) and port (0 = ephemeral), non-blocking. */
int nx_udp_open(nx_udp *u, const char *host, uint16_t port);
void nx_udp_close(nx_udp *u);
/* Sends n packets stored back to back in buf. With GSO, all but the last must
 * have lens[0] bytes (the caller flushes when a packet differs). */
int nx_udp_send(nx_udp *u, const struct sockaddr *to, socklen_t tolen, const uint8_t *buf,
                const size_t *lens, size_t n);
/* Drains up to a batch of NX_UDP_RX_BATCH datagrams, splitting GRO
 * super-packets. Returns the number of datagrams received from the socket
 * (0 when it is empty). */
int nx_udp_recv(nx_udp *u, nx_udp_rx_fn fn, void *ud);
/* Largest UDP payload towards addr without IP fragmentation (from the route's
 * MTU); loopback gives ~64 KiB, Ethernet 1472/1452. */
size_t nx_udp_path_payload(const struct sockaddr *addr, socklen_t len);
/* Impairment: releases delayed datagrams that are due; returns the next due
 * time in ns (UINT64_MAX if none). */
uint64_t nx_udp_flush_delayed(nx_udp *u, uint64_t now);
/* Parses an impairment spec "loss=1%,delay=2ms,jitter=1ms,reorder=1%,dup=0%,seed=7". */
int nx_impair_parse(const char *spec, nx_impair **out);

#endif
