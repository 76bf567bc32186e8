/* The engine side of the QUIC link (quic_glue.c): the callbacks the engine
 * registers with transport/quic.h, which turn link events into engine state
 * (peers, streams into msg.c, message acknowledgements), and the engine's
 * policy for which waiting message gets the next stream. Under ep->mu, on
 * the thread that drives the engine, like every call into the link. */
#ifndef NX_RUNTIME_QUIC_GLUE_H
#define NX_RUNTIME_QUIC_GLUE_H

#include "runtime/engine.h"

/* Creates ep->quic with the engine's flow-control parameters and these
 * callbacks: 0, NEXAR_ERR_INVALID_ARGUMENT (a bad NEXAR_QUIC_CC) or
 * NEXAR_ERR_NOMEM. Needs ep->cfg, ep->knobs and ep->hb_timeout_ns. */
int nx_quic_glue_new(nx_ep *ep);
/* Dials peer p (this rank dials it, proto/route): p->qc is set and p is
 * CONNECTING. 0, NEXAR_ERR_NOMEM or NEXAR_ERR_TLS. */
int nx_quic_glue_dial(nx_ep *ep, nx_peer *p);
/* The engine lets go of p's connection (p is dead or left; p->qc becomes
 * NULL): with why, the peer is told "rank R gave up on you: why". */
void nx_quic_glue_drop(nx_ep *ep, nx_peer *p, const char *why);

#endif
