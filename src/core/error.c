/* Error codes (one X-macro table) and the thread-local error sentence. */
#include "core/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The codes and their texts come from NEXAR_ERRNO_MAP in nexar.h, the one
 * list; nothing here repeats it. */
const char *nexar_strerror(int err) {
  switch (err) {
  case NEXAR_OK:
    return "NEXAR_OK: success";
#define NX_CASE(name, value, text)                                                                 \
  case NEXAR_ERR_##name:                                                                           \
    return "NEXAR_ERR_" #name ": " text;
    NEXAR_ERRNO_MAP(NX_CASE)
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
