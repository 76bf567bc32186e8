// The operations of ProcessGroupNexar: argument checks, the mapping of torch
// dtypes and reduce ops onto libnexar's, staging of tensor lists into one
// buffer, and the libnexar non-blocking call.
#include "nexar_pg.hpp"
#include "tensor_util.hpp"

#include <Python.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace nexar_torch {

using c10d::OpType;

ProcessGroupNexar::ProcessGroupNexar(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), timeout_(timeout) {
  comm_ = form_comm(store, rank, size, timeout);
  init();
}

ProcessGroupNexar::~ProcessGroupNexar() {
  // Waiting for handed-over operations may need a future callback that takes
  // the GIL; never hold it here.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    comm_->shutdown();
    comm_.reset();
  } else {
    comm_->shutdown();
    comm_.reset();
  }
}

std::shared_ptr<Op> ProcessGroupNexar::new_op(const char *name) {
  auto op = std::make_shared<Op>();
  op->comm = comm_;
  op->name = name;
  op->future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  return op;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::start(std::shared_ptr<Op> op, OpType type, int rc,
                                                        std::chrono::milliseconds op_timeout) {
  if (rc) {
    op->fail_now(make_error(op->name, rank_, size_, rc, nexar_last_error()));
  } else if (op_timeout.count() > 0 && op_timeout != timeout_) {
    op->has_deadline = true;
    op->timeout = op_timeout;
    op->deadline = std::chrono::steady_clock::now() + op_timeout;
  }
  return c10::make_intrusive<WorkNexar>(std::move(op), rank_, type);
}

// ------------------------------------------------------------ reductions

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::allreduce(std::vector<at::Tensor> &tensors,
                                                            const c10d::AllreduceOptions &opts) {
  const char *name = "allreduce";
  at::Tensor t = single(tensors, name);
  Dt d = map_dtype(t, name);
  nexar_op nop = map_op(opts.reduceOp, d, name);
  auto op = new_op(name);
  at::Tensor buf = dense(t);
  premultiply(opts.reduceOp, buf, name);
  op->keep = {buf};
  op->outputs = {t};
  if (!buf.is_same(t)) op->post = [t, buf]() mutable { t.copy_(buf); };
  int rc = nexar_all_reduce_nb(comm_->c, ptr(buf), (size_t)buf.numel(), d.dt, nop, &op->req);
  return start(op, OpType::ALLREDUCE, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                       const c10d::AllreduceCoalescedOptions &opts) {
  const char *name = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "nexar ", name, ": no tensors");
  check_tensor(tensors[0], name);
  for (auto &t : tensors)
    check_same(tensors[0], t, name);
  Dt d = map_dtype(tensors[0], name);
  nexar_op nop = map_op(opts.reduceOp, d, name);
  auto op = new_op(name);
  // one buffer, one reduction: the tensors travel together
  at::Tensor flat = flatten(tensors);
  premultiply(opts.reduceOp, flat, name);
  op->keep = {flat};
  op->outputs = tensors;
  op->post = [flat, ts = tensors]() mutable { unflatten(flat, ts); };
  int rc = nexar_all_reduce_nb(comm_->c, ptr(flat), (size_t)flat.numel(), d.dt, nop, &op->req);
  return start(op, OpType::ALLREDUCE_COALESCED, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::reduce(std::vector<at::Tensor> &tensors,
                                                         const c10d::ReduceOptions &opts) {
  const char *name = "reduce";
  at::Tensor t = single(tensors, name);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nexar reduce: root ", opts.rootRank,
              " is outside the group of ", size_);
  Dt d = map_dtype(t, name);
  nexar_op nop = map_op(opts.reduceOp, d, name);
  auto op = new_op(name);
  at::Tensor buf = dense(t);
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
    if (buf.is_same(t)) buf = t.clone(); // the input of a non-root stays as it was
    premultiply(opts.reduceOp, buf, name);
  }
  op->keep = {buf};
  op->outputs = {t};
  if (!buf.is_same(t) && rank_ == opts.rootRank) op->post = [t, buf]() mutable { t.copy_(buf); };
  int rc = nexar_reduce_nb(comm_->c, ptr(buf), (size_t)buf.numel(), d.dt, nop,
                           (uint32_t)opts.rootRank, &op->req);
  return start(op, OpType::REDUCE, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::reduce_scatter(std::vector<at::Tensor> &outputs,
                                  std::vector<std::vector<at::Tensor>> &inputs,
                                  const c10d::ReduceScatterOptions &opts) {
  const char *name = "reduce_scatter";
  at::Tensor out = single(outputs, name);
  TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_, "nexar ", name,
              ": needs one list of ", size_, " input tensors");
  std::vector<size_t> counts;
  bool even = true;
  for (auto &t : inputs[0]) {
    check_same(out, t, name);
    counts.push_back((size_t)t.numel());
    even = even && t.numel() == inputs[0][0].numel();
  }
  TORCH_CHECK((int64_t)counts[rank_] == out.numel(), "nexar ", name, ": the output has ",
              out.numel(), " elements, this rank's input block ", counts[rank_]);
  Dt d = map_dtype(out, name);
  nexar_op nop = map_op(opts.reduceOp, d, name);
  auto op = new_op(name);
  at::Tensor flat = flatten(inputs[0]);
  premultiply(opts.reduceOp, flat, name);
  at::Tensor buf = dense(out);
  op->keep = {flat, buf};
  op->outputs = {out};
  if (!buf.is_same(out)) op->post = [out, buf]() mutable { out.copy_(buf); };
  int rc;
  if (even)
    rc = nexar_reduce_scatter_nb(comm_->c, ptr(flat), ptr(buf), (size_t)buf.numel(), d.dt, nop,
                                 &op->req);
  else
    rc = nexar_reduce_scatter_v_nb(comm_->c, ptr(flat), ptr(buf), op->hold(counts), d.dt, nop,
                                   &op->req);
  return start(op, OpType::REDUCE_SCATTER, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                        const c10d::ReduceScatterOptions &opts) {
  const char *name = "_reduce_scatter_base";
  check_tensor(output, name);
  check_same(output, input, name);
  TORCH_CHECK(input.numel() == output.numel() * size_, "nexar ", name, ": the input has ",
              input.numel(), " elements, expected output size ", output.numel(), " x ", size_);
  Dt d = map_dtype(output, name);
  nexar_op nop = map_op(opts.reduceOp, d, name);
  auto op = new_op(name);
  at::Tensor in = dense(input);
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
    if (in.is_same(input)) in = input.clone();
    premultiply(opts.reduceOp, in, name);
  }
  at::Tensor buf = dense(output);
  op->keep = {in, buf};
  op->outputs = {output};
  if (!buf.is_same(output)) op->post = [output, buf]() mutable { output.copy_(buf); };
  int rc = nexar_reduce_scatter_nb(comm_->c, ptr(in), ptr(buf), (size_t)buf.numel(), d.dt, nop,
                                   &op->req);
  return start(op, OpType::_REDUCE_SCATTER_BASE, rc, opts.timeout);
}

// ------------------------------------------------------------ data movement

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::broadcast(std::vector<at::Tensor> &tensors,
                                                            const c10d::BroadcastOptions &opts) {
  const char *name = "broadcast";
  at::Tensor t = single(tensors, name);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nexar broadcast: root ", opts.rootRank,
              " is outside the group of ", size_);
  Dt d = map_dtype(t, name);
  auto op = new_op(name);
  at::Tensor buf = dense(t);
  op->keep = {buf};
  op->outputs = {t};
  if (!buf.is_same(t)) op->post = [t, buf]() mutable { t.copy_(buf); };
  int rc = nexar_broadcast_nb(comm_->c, ptr(buf), (size_t)buf.numel(), d.dt,
                              (uint32_t)opts.rootRank, &op->req);
  return start(op, OpType::BROADCAST, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                             std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts) {
  const char *name = "allgather";
  at::Tensor in = single(inputs, name);
  TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_, "nexar ", name,
              ": needs one list of ", size_, " output tensors");
  std::vector<size_t> counts;
  for (auto &t : outputs[0]) {
    check_same(in, t, name);
    counts.push_back((size_t)t.numel());
  }
  TORCH_CHECK((int64_t)counts[rank_] == in.numel(), "nexar ", name, ": the input has ", in.numel(),
              " elements, this rank's output block ", counts[rank_]);
  Dt d = map_dtype(in, name);
  auto op = new_op(name);
  at::Tensor src = dense(in);
  op->keep = {src};
  op->outputs = outputs[0];
  // every rank calls all_gather_v (ranks must agree on the call), straight
  // into the output tensors when they allow it, else into one staging buffer
  char *base = nullptr;
  std::vector<size_t> displs;
  int rc;
  if (place(outputs[0], &src, &base, &displs)) {
    for (auto &t : outputs[0])
      op->keep.push_back(t);
    rc = nexar_all_gather_v_nb(comm_->c, ptr(src), (size_t)src.numel(), base, op->hold(counts),
                               op->hold(displs), d.dt, &op->req);
  } else {
    size_t total = std::accumulate(counts.begin(), counts.end(), (size_t)0);
    at::Tensor flat = at::empty({(int64_t)total}, src.options());
    op->keep.push_back(flat);
    op->post = [flat, ts = outputs[0]]() mutable { unflatten(flat, ts); };
    rc = nexar_all_gather_v_nb(comm_->c, ptr(src), (size_t)src.numel(), ptr(flat), op->hold(counts),
                               nullptr, d.dt, &op->req);
  }
  return start(op, OpType::ALLGATHER, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::_allgather_base(at::Tensor &output, at::Tensor &input,
                                   const c10d::AllgatherOptions &opts) {
  const char *name = "_allgather_base";
  check_tensor(input, name);
  check_same(input, output, name);
  TORCH_CHECK(output.numel() == input.numel() * size_, "nexar ", name, ": the output has ",
              output.numel(), " elements, expected input size ", input.numel(), " x ", size_);
  Dt d = map_dtype(input, name);
  auto op = new_op(name);
  at::Tensor src = dense(input), buf = dense(output);
  op->keep = {src, buf};
  op->outputs = {output};
  if (!buf.is_same(output)) op->post = [output, buf]() mutable { output.copy_(buf); };
  int rc = nexar_all_gather_nb(comm_->c, ptr(src), ptr(buf), (size_t)src.numel(), d.dt, &op->req);
  return start(op, OpType::_ALLGATHER_BASE, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                       std::vector<at::Tensor> &inputs,
                                       const c10d::AllgatherOptions &opts) {
  const char *name = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "nexar ", name,
              ": needs one output list per input tensor");
  check_tensor(inputs[0], name);
  int64_t per_rank = 0;
  for (size_t i = 0; i < inputs.size(); i++) {
    check_same(inputs[0], inputs[i], name);
    TORCH_CHECK((int)outputs[i].size() == size_, "nexar ", name, ": output list ", i, " has ",
                outputs[i].size(), " tensors, expected ", size_);
    for (auto &o : outputs[i]) {
      check_same(inputs[0], o, name);
      TORCH_CHECK(o.numel() == inputs[i].numel(), "nexar ", name,
                  ": an output tensor differs in size from its input");
    }
    per_rank += inputs[i].numel();
  }
  Dt d = map_dtype(inputs[0], name);
  auto op = new_op(name);
  at::Tensor src = flatten(inputs);
  at::Tensor flat = at::empty({per_rank * size_}, src.options());
  op->keep = {src, flat};
  for (auto &l : outputs)
    for (auto &o : l)
      op->outputs.push_back(o);
  op->post = [flat, outs = outputs, per_rank, n = size_]() mutable {
    for (int r = 0; r < n; r++) {
      int64_t off = r * per_rank;
      for (auto &l : outs) {
        auto &o = l[r];
        o.copy_(flat.narrow(0, off, o.numel()).view(o.sizes()));
        off += o.numel();
      }
    }
  };
  int rc = nexar_all_gather_nb(comm_->c, ptr(src), ptr(flat), (size_t)per_rank, d.dt, &op->req);
  return start(op, OpType::ALLGATHER_COALESCED, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::gather(std::vector<std::vector<at::Tensor>> &outputs,
                          std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts) {
  const char *name = "gather";
  at::Tensor in = single(inputs, name);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nexar gather: root ", opts.rootRank,
              " is outside the group of ", size_);
  bool root = rank_ == opts.rootRank;
  if (root) {
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == size_, "nexar ", name,
                ": the root needs one list of ", size_, " output tensors");
    for (auto &t : outputs[0]) {
      check_same(in, t, name);
      TORCH_CHECK(t.numel() == in.numel(), "nexar ", name,
                  ": every output tensor must have the input's size ", in.numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "nexar ", name,
                ": only the root takes output tensors");
  }
  Dt d = map_dtype(in, name);
  auto op = new_op(name);
  at::Tensor src = dense(in);
  op->keep = {src};
  at::Tensor flat;
  if (root) {
    flat = at::empty({in.numel() * size_}, src.options());
    op->keep.push_back(flat);
    op->outputs = outputs[0];
    op->post = [flat, ts = outputs[0]]() mutable { unflatten(flat, ts); };
  }
  int rc = nexar_gather_nb(comm_->c, ptr(src), root ? ptr(flat) : nullptr, (size_t)src.numel(),
                           d.dt, (uint32_t)opts.rootRank, &op->req);
  return start(op, OpType::GATHER, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupNexar::scatter(std::vector<at::Tensor> &outputs,
                           std::vector<std::vector<at::Tensor>> &inputs,
                           const c10d::ScatterOptions &opts) {
  const char *name = "scatter";
  at::Tensor out = single(outputs, name);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "nexar scatter: root ", opts.rootRank,
              " is outside the group of ", size_);
  bool root = rank_ == opts.rootRank;
  if (root) {
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == size_, "nexar ", name,
                ": the root needs one list of ", size_, " input tensors");
    for (auto &t : inputs[0]) {
      check_same(out, t, name);
      TORCH_CHECK(t.numel() == out.numel(), "nexar ", name,
                  ": every input tensor must have the output's size ", out.numel());
    }
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "nexar ", name,
                ": only the root takes input tensors");
  }
  Dt d = map_dtype(out, name);
  auto op = new_op(name);
  at::Tensor buf = dense(out);
  op->keep = {buf};
  op->outputs = {out};
  at::Tensor flat;
  if (root) {
    flat = flatten(inputs[0]);
    op->keep.push_back(flat);
  }
  if (!buf.is_same(out)) op->post = [out, buf]() mutable { out.copy_(buf); };
  int rc = nexar_scatter_nb(comm_->c, root ? ptr(flat) : nullptr, ptr(buf), (size_t)buf.numel(),
                            d.dt, (uint32_t)opts.rootRank, &op->req);
  return start(op, OpType::SCATTER, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::alltoall_base(at::Tensor &output,
                                                                at::Tensor &input,
                                                                std::vector<int64_t> &outputSplits,
                                                                std::vector<int64_t> &inputSplits,
                                                                const c10d::AllToAllOptions &opts) {
  const char *name = "alltoall_base";
  check_tensor(output, name);
  check_same(output, input, name);
  Dt d = map_dtype(input, name);
  auto op = new_op(name);
  at::Tensor src = dense(input), buf = dense(output);
  op->keep = {src, buf};
  op->outputs = {output};
  if (!buf.is_same(output)) op->post = [output, buf]() mutable { output.copy_(buf); };
  int rc;
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % size_ == 0, "nexar ", name,
                ": without split sizes, input and output need equal sizes divisible by ", size_,
                " (got ", input.numel(), " and ", output.numel(), ")");
    rc = nexar_all_to_all_nb(comm_->c, ptr(src), ptr(buf), (size_t)(input.numel() / size_), d.dt,
                             &op->req);
  } else {
    // split sizes count rows of dimension 0; none given means equal rows
    auto counts = [&](const at::Tensor &t, const std::vector<int64_t> &splits, const char *what) {
      std::vector<size_t> c((size_t)size_);
      int64_t rows = t.dim() ? t.size(0) : 1;
      int64_t row = rows ? t.numel() / rows : 0;
      if (splits.empty()) {
        TORCH_CHECK(rows % size_ == 0, "nexar ", name, ": the ", what, " has ", rows,
                    " rows, not divisible by ", size_);
        for (auto &x : c)
          x = (size_t)(rows / size_ * row);
      } else {
        TORCH_CHECK((int)splits.size() == size_, "nexar ", name, ": ", splits.size(), " ", what,
                    " split sizes, expected ", size_);
        int64_t sum = 0;
        for (int i = 0; i < size_; i++) {
          TORCH_CHECK(splits[i] >= 0, "nexar ", name, ": a negative split size");
          sum += splits[i];
          c[i] = (size_t)(splits[i] * row);
        }
        TORCH_CHECK(sum == rows, "nexar ", name, ": the ", what, " split sizes add up to ", sum,
                    ", the tensor has ", rows, " rows");
      }
      return c;
    };
    const size_t *sc = op->hold(counts(input, inputSplits, "input"));
    const size_t *rcn = op->hold(counts(output, outputSplits, "output"));
    rc = nexar_all_to_all_v_nb(comm_->c, ptr(src), sc, nullptr, ptr(buf), rcn, nullptr, d.dt,
                               &op->req);
  }
  return start(op, OpType::ALLTOALL_BASE, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::alltoall(std::vector<at::Tensor> &outputs,
                                                           std::vector<at::Tensor> &inputs,
                                                           const c10d::AllToAllOptions &opts) {
  const char *name = "alltoall";
  TORCH_CHECK((int)outputs.size() == size_ && (int)inputs.size() == size_, "nexar ", name,
              ": needs ", size_, " input and ", size_, " output tensors");
  check_tensor(inputs[0], name);
  std::vector<size_t> sc, rcn;
  for (int i = 0; i < size_; i++) {
    check_same(inputs[0], inputs[i], name);
    check_same(inputs[0], outputs[i], name);
    sc.push_back((size_t)inputs[i].numel());
    rcn.push_back((size_t)outputs[i].numel());
  }
  Dt d = map_dtype(inputs[0], name);
  auto op = new_op(name);
  op->outputs = outputs;
  // straight from the input and into the output tensors when they allow it
  char *sbase = nullptr, *rbase = nullptr;
  std::vector<size_t> sd, rd;
  const size_t *sdp = nullptr, *rdp = nullptr;
  at::Tensor src, flat;
  if (place(inputs, nullptr, &sbase, &sd)) {
    for (auto &t : inputs)
      op->keep.push_back(t);
    sdp = op->hold(sd);
  } else {
    src = flatten(inputs);
    op->keep.push_back(src);
    sbase = static_cast<char *>(ptr(src));
  }
  std::vector<at::Tensor> all = outputs;
  all.insert(all.end(), inputs.begin(), inputs.end()); // outputs may not overlap inputs
  std::vector<size_t> ignore;
  char *ignore_base;
  if (place(outputs, nullptr, &rbase, &rd) && place(all, nullptr, &ignore_base, &ignore)) {
    for (auto &t : outputs)
      op->keep.push_back(t);
    rdp = op->hold(rd);
  } else {
    int64_t total = std::accumulate(rcn.begin(), rcn.end(), (int64_t)0);
    flat = at::empty({total}, inputs[0].options().memory_format(at::MemoryFormat::Contiguous));
    op->keep.push_back(flat);
    rbase = static_cast<char *>(ptr(flat));
    op->post = [flat, ts = outputs]() mutable { unflatten(flat, ts); };
  }
  int rc = nexar_all_to_all_v_nb(comm_->c, sbase, op->hold(sc), sdp, rbase, op->hold(rcn), rdp,
                                 d.dt, &op->req);
  return start(op, OpType::ALLTOALL, rc, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::barrier(const c10d::BarrierOptions &opts) {
  auto op = new_op("barrier");
  int rc = nexar_barrier_nb(comm_->c, &op->req);
  return start(op, OpType::BARRIER, rc, opts.timeout);
}

} // namespace nexar_torch
