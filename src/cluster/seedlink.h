/* A member's channel to the seed after formation (cluster/seed_elastic.c is
 * the other end): it learns there that joiners wait, and the coordinator of
 * a checkpoint asks there for them. Losing it only stops admissions. */
#ifndef NX_CLUSTER_SEEDLINK_H
#define NX_CLUSTER_SEEDLINK_H

#include <pthread.h>
#include <stdint.h>

#include "cluster/bootmsg.h"
#include "cluster/chan.h"

typedef struct nx_seedlink {
  pthread_mutex_t mu; /* one checkpoint at a time uses it */
  nx_chan *ch;        /* NULL once the seed is gone */
  int waiting;        /* the seed said joiners wait, and none was asked for since */
} nx_seedlink;

/* Takes ownership of ch. NULL on NOMEM (ch is then closed). */
nx_seedlink *nx_seedlink_new(nx_chan *ch);
void nx_seedlink_del(void *link); /* the endpoint's destructor for it */
/* Reads the notices that arrived (no waiting); 1 if joiners wait. */
int nx_seedlink_poll(nx_seedlink *l);
/* One admission request and its answer (within timeout_ms). IO if the seed
 * is gone (the link is then closed), TIMEOUT, PROTOCOL. */
int nx_seedlink_admit(nx_seedlink *l, const nx_admit_req *q, nx_admit_list *out,
                      uint32_t timeout_ms);

#endif
