// Interim: until libnexar's variable-count collectives and the AVG/bitwise
// ops (issue 14's C API part) are merged, those calls fail at run time with
// NEXAR_ERR_UNSUPPORTED. CMake defines NEXAR_TORCH_HAVE_V when nexar.h has them.
#pragma once
#include <nexar/nexar.h>
#ifndef NEXAR_TORCH_HAVE_V
#define NEXAR_AVG ((nexar_op)4)
#define NEXAR_BAND ((nexar_op)5)
#define NEXAR_BOR ((nexar_op)6)
#define NEXAR_BXOR ((nexar_op)7)
static inline int nexar_all_gather_v_nb(nexar_client *, const void *, size_t, void *,
                                        const size_t *, const size_t *, nexar_dtype,
                                        nexar_request **req) {
  *req = nullptr;
  return NEXAR_ERR_UNSUPPORTED;
}
static inline int nexar_reduce_scatter_v_nb(nexar_client *, const void *, void *, const size_t *,
                                            nexar_dtype, nexar_op, nexar_request **req) {
  *req = nullptr;
  return NEXAR_ERR_UNSUPPORTED;
}
static inline int nexar_all_to_all_v_nb(nexar_client *, const void *, const size_t *,
                                        const size_t *, void *, const size_t *, const size_t *,
                                        nexar_dtype, nexar_request **req) {
  *req = nullptr;
  return NEXAR_ERR_UNSUPPORTED;
}
#endif
