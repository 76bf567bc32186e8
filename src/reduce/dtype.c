/* Element type and operator metadata (public) and validity checks. */
#include "reduce/reduce.h"

int nx_dtype_valid(int dt) {
  return dt >= NEXAR_F32 && dt <= NEXAR_U64;
}

int nx_op_valid(int op) {
  return op >= NEXAR_SUM && op <= NEXAR_BXOR;
}

int nx_dtype_is_int(int dt) {
  return nx_dtype_valid(dt) && dt != NEXAR_F32 && dt != NEXAR_F64 && dt != NEXAR_F16 &&
         dt != NEXAR_BF16;
}

int nx_op_dtype_valid(int dt, int op) {
  if (!nx_dtype_valid(dt) || !nx_op_valid(op)) return 0;
  return op < NEXAR_BAND || nx_dtype_is_int(dt);
}

size_t nexar_dtype_size(nexar_dtype dt) {
  switch (dt) {
  case NEXAR_I8:
  case NEXAR_U8:
    return 1;
  case NEXAR_F16:
  case NEXAR_BF16:
    return 2;
  case NEXAR_F32:
  case NEXAR_I32:
  case NEXAR_U32:
    return 4;
  case NEXAR_F64:
  case NEXAR_I64:
  case NEXAR_U64:
    return 8;
  }
  return 0; /* a value outside the enum (it arrives from users and the wire) */
}

const char *nexar_dtype_name(nexar_dtype dt) {
  static const char *const names[] = {"f32", "f64", "f16", "bf16", "i8",
                                      "i32", "i64", "u8",  "u32",  "u64"};
  return nx_dtype_valid((int)dt) ? names[dt] : "?";
}

const char *nexar_op_name(nexar_op op) {
  static const char *const names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  return nx_op_valid((int)op) ? names[op] : "?";
}
