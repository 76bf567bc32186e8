/* Error codes (one X-macro table) and the thread-local error sentence. */
#include "core/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX_ERRORS(X)                                                                               \
  X(NEXAR_OK, "success")                                                                           \
  X(NEXAR_ERR_INVALID_ARGUMENT, "invalid argument")                                                \
  X(NEXAR_ERR_INVALID_RANK, "rank or root outside the communicator")                               \
  X(NEXAR_ERR_SIZE_MISMATCH, "message or buffer of another length than asked")                     \
  X(NEXAR_ERR_MISMATCH, "ranks called different collectives or arguments")                         \
  X(NEXAR_ERR_TIMEOUT, "timed out")                                                                \
  X(NEXAR_ERR_PEER_LOST, "peer lost")                                                              \
  X(NEXAR_ERR_ABORTED, "communicator aborted")                                                     \
  X(NEXAR_ERR_AUTH, "authentication failed (cluster token or certificate)")                        \
  X(NEXAR_ERR_TLS, "TLS failure")                                                                  \
  X(NEXAR_ERR_PROTOCOL, "malformed or unexpected bytes from the network")                          \
  X(NEXAR_ERR_IO, "I/O error")                                                                     \
  X(NEXAR_ERR_NOMEM, "out of memory")                                                              \
  X(NEXAR_ERR_RPC_NO_HANDLER, "no RPC handler for this function id")                               \
  X(NEXAR_ERR_RPC_FAILED, "remote RPC handler failed")                                             \
  X(NEXAR_ERR_UNSUPPORTED, "unsupported")

const char *nexar_strerror(int err) {
  switch (err) {
#define NX_CASE(code, text)                                                                        \
  case code:                                                                                       \
    return #code ": " text;
    NX_ERRORS(NX_CASE)
#undef NX_CASE
  default:
    return "NEXAR_ERR_?: unknown error code";
  }
}

static _Thread_local char nx_errbuf[512] = "no error";

const char *nexar_last_error(void) {
  return nx_errbuf;
}

void nx_set_error_text(const char *text) {
  snprintf(nx_errbuf, sizeof nx_errbuf, "%s", text ? text : "unknown error");
}

int nx_fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(nx_errbuf, sizeof nx_errbuf, fmt, ap);
  va_end(ap);
  NX_DEBUG("error %d: %s", err, nx_errbuf);
  return err;
}

const char *nexar_version(void) {
  return "0.1.0";
}

void nexar_free(void *p) {
  free(p);
}
