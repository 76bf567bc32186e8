/* The seed's state, shared by seed.c (discovery and formation) and
 * seed_elastic.c (admission after formation). Internal to src/cluster. */
#ifndef NX_CLUSTER_SEED_INT_H
#define NX_CLUSTER_SEED_INT_H

#include <pthread.h>
#include <sys/socket.h>

#include "cluster/bootmsg.h"
#include "cluster/chan.h"
#include "core/config.h"
#include "transport/pki.h"

typedef struct pending {
  int fd;
  int ready; /* it spoke (or closed): waits for a handshake thread */
  uint64_t since;
  struct sockaddr_storage src;
} pending;

typedef struct joiner {
  struct joiner *next;
  nexar_seed *s;
  pthread_t thr;
  int fd;
  int cfd; /* the channel's socket while registered (for polling) */
  uint64_t accepted_ns;
  int finished;
  int formed_ok; /* reported FORMED */
  /* registration */
  int registered;
  uint32_t arrival;
  nx_hello hello;
  uint32_t rank;
  uint8_t *cert;
  size_t cert_len;
  /* elastic admission (seed_elastic.c), under s->mu */
  int late;    /* arrived after formation: waits in the queue */
  int offered; /* a checkpoint took it: offer_* are set */
  uint8_t *offer_welcome, *offer_view;
  size_t offer_wlen, offer_vlen;
} joiner;

struct nexar_seed {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  nexar_config cfg;
  uint32_t world;
  int listen_fd;
  char addr[NX_ADDR_MAX];
  char token[130];
  uint8_t cluster_id[16];
  nx_ca *ca;
  uint8_t *ca_der;
  size_t ca_len;
  pthread_t accept_thr;
  int stop;
  joiner *joiners;
  pending *pend;
  int npend;
  int handshaking;
  uint32_t nregistered, arrivals;
  int formed;    /* ranks assigned, certificates issued */
  uint32_t sent; /* welcomes delivered */
  uint32_t done; /* joiners whose formation ended (FORMED, lost or gave up) */
  uint32_t lost; /* the first rank lost during formation, or NX_SEED_NO_RANK */
  char lost_why[200];
  char (*addrs)[NX_ADDR_MAX];
  char (*hosts)[NX_HOST_MAX];
  /* elastic admission (seed_elastic.c) */
  uint32_t next_id;     /* the next member id to hand out (ids are never reused) */
  uint64_t waiting_gen; /* bumped when a joiner queues: members are told */
};

void nx_seed_refuse(nx_chan *ch, int code, const char *reason);
void nx_seed_timed_wait_locked(nexar_seed *s, long ms);
/* A worker that arrived after formation (its Hello decoded): queued until a
 * checkpoint takes it, then given its Welcome and View; then served as a
 * member. Returns when its channel closes or the seed stops. */
void nx_seed_late_joiner(nexar_seed *s, struct joiner *j, nx_chan *ch, const char *peer);
/* A member's channel after its mesh is up: tells it when joiners wait and
 * answers its admission requests, until the channel closes or the seed stops. */
void nx_seed_member_loop(nexar_seed *s, struct joiner *j, nx_chan *ch, const char *peer);

#endif
