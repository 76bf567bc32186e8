// Helpers of the operations: dtype and reduce-op mapping, argument checks,
// staging of tensor lists.
#pragma once

#include "nexar_pg.hpp"

#include <algorithm>
#include <cstdint>

namespace nexar_torch {

inline const char *const kSupported =
    "float32, float64, float16, bfloat16, int8, uint8, int32, int64 and bool";

struct Dt {
  nexar_dtype dt;
  bool is_bool, is_float;
};

inline Dt map_dtype(const at::Tensor &t, const char *op) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return {NEXAR_F32, false, true};
  case at::kDouble:
    return {NEXAR_F64, false, true};
  case at::kHalf:
    return {NEXAR_F16, false, true};
  case at::kBFloat16:
    return {NEXAR_BF16, false, true};
  case at::kChar:
    return {NEXAR_I8, false, false};
  case at::kByte:
    return {NEXAR_U8, false, false};
  case at::kInt:
    return {NEXAR_I32, false, false};
  case at::kLong:
    return {NEXAR_I64, false, false};
  case at::kBool:
    return {NEXAR_U8, true, false}; // one byte, 0 or 1
  default:
    TORCH_CHECK(false, "nexar ", op, ": dtype ", t.scalar_type(),
                " is not supported by the nexar backend (supported: ", kSupported, ")");
  }
}

inline const char *op_name(c10d::ReduceOp::RedOpType r) {
  switch (r) {
  case c10d::ReduceOp::SUM:
    return "SUM";
  case c10d::ReduceOp::AVG:
    return "AVG";
  case c10d::ReduceOp::PRODUCT:
    return "PRODUCT";
  case c10d::ReduceOp::MIN:
    return "MIN";
  case c10d::ReduceOp::MAX:
    return "MAX";
  case c10d::ReduceOp::BAND:
    return "BAND";
  case c10d::ReduceOp::BOR:
    return "BOR";
  case c10d::ReduceOp::BXOR:
    return "BXOR";
  case c10d::ReduceOp::PREMUL_SUM:
    return "PREMUL_SUM";
  default:
    return "UNKNOWN";
  }
}

// bool is a byte of 0 or 1: SUM is logical or (MAX), PRODUCT logical and (MIN).
inline nexar_op map_op(const c10d::ReduceOp &rop, const Dt &d, const char *op) {
  auto r = rop.op_;
  switch (r) {
  case c10d::ReduceOp::SUM:
  case c10d::ReduceOp::PREMUL_SUM:
    return d.is_bool ? NEXAR_MAX : NEXAR_SUM;
  case c10d::ReduceOp::PRODUCT:
    return d.is_bool ? NEXAR_MIN : NEXAR_PROD;
  case c10d::ReduceOp::MIN:
    return NEXAR_MIN;
  case c10d::ReduceOp::MAX:
    return NEXAR_MAX;
  case c10d::ReduceOp::AVG:
    TORCH_CHECK(!d.is_bool, "nexar ", op, ": ReduceOp.AVG is not defined for bool tensors");
    return NEXAR_AVG;
  case c10d::ReduceOp::BAND:
  case c10d::ReduceOp::BOR:
  case c10d::ReduceOp::BXOR:
    TORCH_CHECK(!d.is_float, "nexar ", op, ": ReduceOp.", op_name(r),
                " needs an integer or bool tensor, not a floating point one");
    return r == c10d::ReduceOp::BAND  ? NEXAR_BAND
           : r == c10d::ReduceOp::BOR ? NEXAR_BOR
                                      : NEXAR_BXOR;
  default:
    TORCH_CHECK(false, "nexar ", op, ": unsupported reduce op ", (int)r);
  }
}

// PREMUL_SUM multiplies the input by a factor before the sum (NCCL's op,
// which torch creates with _make_nccl_premul_sum).
inline void premultiply(const c10d::ReduceOp &rop, at::Tensor &buf, const char *op) {
  if (rop.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto *s = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(rop.supplement_.get());
  TORCH_CHECK(s, "nexar ", op, ": PREMUL_SUM without its factor");
  if (!s->tensor_factors.empty())
    buf.mul_(s->tensor_factors[0].to(buf.device()));
  else
    buf.mul_(s->double_factor);
}

inline void check_tensor(const at::Tensor &t, const char *op) {
  TORCH_CHECK(t.defined(), "nexar ", op, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "nexar ", op,
              ": the nexar backend takes CPU tensors, got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "nexar ", op, ": only dense (strided) tensors");
}

inline const at::Tensor &single(std::vector<at::Tensor> &ts, const char *op) {
  TORCH_CHECK(ts.size() == 1, "nexar ", op, ": takes exactly one tensor per call, got ", ts.size());
  check_tensor(ts[0], op);
  return ts[0];
}

inline void check_same(const at::Tensor &a, const at::Tensor &b, const char *op) {
  check_tensor(b, op);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "nexar ", op, ": tensors of different dtypes (",
              a.scalar_type(), " and ", b.scalar_type(), ")");
}

inline size_t nbytes(const at::Tensor &t) {
  return (size_t)t.numel() * t.element_size();
}

// A contiguous tensor to hand to libnexar for t: t itself, or a contiguous
// copy that the op's post step copies back.
inline at::Tensor dense(const at::Tensor &t) {
  return t.is_contiguous() ? t : t.contiguous();
}

// The list concatenated into one new contiguous buffer.
inline at::Tensor flatten(const std::vector<at::Tensor> &ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (auto &t : ts)
    flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies the consecutive blocks of flat into the list.
inline void unflatten(const at::Tensor &flat, std::vector<at::Tensor> &ts) {
  int64_t off = 0;
  for (auto &t : ts) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

inline void *ptr(const at::Tensor &t) {
  return t.numel() ? t.data_ptr() : nullptr;
}

// Zero-copy placement of a tensor list for a variable-count call: when every
// tensor is contiguous, at a whole-element offset from the lowest one, and
// none overlaps another or `avoid`, *base is the lowest address and displs
// the offsets in elements. Otherwise false (the caller stages).
inline bool place(const std::vector<at::Tensor> &ts, const at::Tensor *avoid, char **base,
                  std::vector<size_t> *displs) {
  struct R {
    uintptr_t lo, hi;
  };
  std::vector<R> rs;
  uintptr_t lo = UINTPTR_MAX;
  size_t es = ts.empty() ? 1 : ts[0].element_size();
  for (auto &t : ts) {
    if (!t.is_contiguous()) return false;
    if (!t.numel()) continue;
    auto p = reinterpret_cast<uintptr_t>(t.data_ptr());
    rs.push_back({p, p + nbytes(t)});
    lo = std::min(lo, p);
  }
  if (avoid && avoid->numel()) {
    auto p = reinterpret_cast<uintptr_t>(avoid->data_ptr());
    rs.push_back({p, p + nbytes(*avoid)});
  }
  std::vector<R> sorted = rs;
  std::sort(sorted.begin(), sorted.end(), [](const R &a, const R &b) { return a.lo < b.lo; });
  for (size_t i = 1; i < sorted.size(); i++)
    if (sorted[i].lo < sorted[i - 1].hi) return false;
  displs->assign(ts.size(), 0);
  for (size_t i = 0; i < ts.size(); i++) {
    if (!ts[i].numel()) continue;
    uintptr_t off = reinterpret_cast<uintptr_t>(ts[i].data_ptr()) - lo;
    if (off % es) return false;
    (*displs)[i] = off / es;
  }
  *base = lo == UINTPTR_MAX ? nullptr : reinterpret_cast<char *>(lo);
  return true;
}

} // namespace nexar_torch
