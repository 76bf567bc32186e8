/* The peer table: one allocation per member id (pointer-stable, since the
 * link and the queues hold peer pointers), address resolution, and the
 * growth that admits members after formation. Under ep->mu once the progress
 * thread runs. */
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/addr.h"
#include "runtime/engine.h"
#include "transport/quic.h"

/* A dual-stack socket: IPv6, bound to every interface, IPv4 not turned off. */
static int dual_stack(const nx_ep *ep) {
  const struct sockaddr_in6 *l = (const struct sockaddr_in6 *)&ep->udp.local;
  int v6only = 1;
  socklen_t ol = sizeof v6only;
  return ep->udp.family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&l->sin6_addr) &&
         getsockopt(ep->udp.fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) == 0 && !v6only;
}

/* Rank j's advertised address as our socket reaches it: of the socket's
 * family, or IPv4 mapped into IPv6 on a dual-stack socket. */
static int resolve(const nx_ep *ep, uint32_t j, const char *hostport, struct sockaddr_storage *ss,
                   socklen_t *len) {
  char host[NX_ADDR_HOST_MAX];
  uint16_t port;
  int rc = nx_addr_split(hostport, "peer address", host, sizeof host, &port);
  if (rc) return rc;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g || !res)
    return nx_fail(NEXAR_ERR_IO, "cannot resolve the address of rank %u '%s': %s", j, hostport,
                   gai_strerror(g));
  const struct addrinfo *pick = NULL, *v4 = NULL;
  for (const struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next) {
    if (ai->ai_family == ep->udp.family)
      pick = ai;
    else if (ai->ai_family == AF_INET && !v4)
      v4 = ai;
  }
  if (!pick && v4 && dual_stack(ep)) pick = v4;
  if (!pick) {
    char mine[NX_ADDR_TEXT_MAX];
    nx_addr_format((const struct sockaddr *)&ep->udp.local, ep->udp.locallen, mine, sizeof mine, 1);
    freeaddrinfo(res);
    return nx_fail(NEXAR_ERR_IO,
                   "rank %u advertises %s, which has no %s address, and this endpoint's socket is "
                   "%s (%s): bind to [::]:port (NEXAR_BIND_ADDR) to reach IPv4 and IPv6 peers",
                   j, hostport, ep->udp.family == AF_INET6 ? "IPv6" : "IPv4",
                   ep->udp.family == AF_INET6 ? "IPv6" : "IPv4", mine);
  }
  memcpy(ss, pick->ai_addr, pick->ai_addrlen);
  *len = pick->ai_addrlen;
  freeaddrinfo(res);
  if (ep->udp.family == AF_INET6) nx_sockaddr_map_v4(ss, len);
  return 0;
}

int nx_ep_peers_alloc(nx_ep *ep, uint32_t n) {
  nx_peer **pv = nx_calloc(n ? n : 1, sizeof *pv);
  for (uint32_t j = 0; pv && j < n; j++)
    if (!(pv[j] = nx_calloc(1, sizeof *pv[j]))) {
      while (j-- > 0)
        free(pv[j]);
      free(pv);
      pv = NULL;
    }
  if (!pv) return NEXAR_ERR_NOMEM;
  ep->peers = pv;
  ep->world = n;
  return 0;
}

void nx_ep_peers_free(nx_ep *ep) {
  for (uint32_t j = 0; ep->peers && j < ep->world; j++)
    free(ep->peers[j]);
  free(ep->peers);
  ep->peers = NULL;
}

int nx_ep_peer_init(nx_ep *ep, nx_peer *p, uint32_t id, int self, const char *addr) {
  uint64_t now = nx_now_ns();
  p->rank = id;
  snprintf(p->addrstr, sizeof p->addrstr, "%s", addr ? addr : "");
  p->last_heard_ns = now;
  p->next_hb_ns = now + ep->hb_interval_ns;
  if (self) {
    p->state = NX_PEER_UP;
    return 0;
  }
  if (!addr || !*addr) { /* an id outside this member's view: never dialed, never heard */
    p->state = NX_PEER_DEAD;
    p->departed = 1;
    p->absent = 1;
    p->dead_code = NEXAR_ERR_PEER_LOST;
    snprintf(p->why, sizeof p->why, "not a member of this view");
    return 0;
  }
  return resolve(ep, id, addr, &p->addr, &p->addrlen);
}

int nx_ep_add_peer_locked(nx_ep *ep, uint32_t id, const char *addr) {
  if (!addr || !*addr || id == ep->rank)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admitting member %u: no address", id);
  if (ep->route.topology) /* the graph, hence every rank's neighbours, would change */
    return nx_fail(NEXAR_ERR_UNSUPPORTED,
                   "admitting member %u: a sparse topology does not grow (elastic joins need "
                   "full_mesh)",
                   id);
  if (id >= NX_PEER_ID_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admitting member %u: ids end at %u", id,
                   NX_PEER_ID_MAX);
  if (id < ep->world && !ep->peers[id]->absent) {
    if (ep->peers[id]->state != NX_PEER_DEAD) return 0; /* known already */
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "admitting member %u: it was a member and is gone",
                   id);
  }
  if (id >= ep->world) {
    nx_peer **pv = realloc(ep->peers, (size_t)(id + 1) * sizeof *pv);
    if (!pv) return nx_fail(NEXAR_ERR_NOMEM, "admitting member %u", id);
    ep->peers = pv;
    for (uint32_t j = ep->world; j <= id; j++) {
      nx_peer *p = nx_calloc(1, sizeof *p);
      if (!p) return nx_fail(NEXAR_ERR_NOMEM, "admitting member %u", id); /* table stays valid */
      nx_ep_peer_init(ep, p, j, 0, NULL);
      ep->peers[j] = p;
      ep->world = j + 1;
    }
    ep->route.world = ep->world;
    nx_quic_set_members(ep->quic, ep->world);
  }
  nx_peer *p = ep->peers[id];
  memset(p, 0, sizeof *p);
  int rc = nx_ep_peer_init(ep, p, id, 0, addr);
  if (!rc && ep->cfg.bulk_transport) rc = nx_random(p->bulk_secret, 32);
  if (rc) {
    nx_ep_peer_init(ep, p, id, 0, NULL);
    return rc;
  }
  p->state = NX_PEER_INIT; /* the progress thread dials it if the route says so */
  nx_ep_wake(ep);
  return 0;
}
