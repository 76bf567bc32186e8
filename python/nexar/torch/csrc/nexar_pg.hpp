// The torch.distributed backend "nexar": a c10d::ProcessGroup (torch 1.13)
// over libnexar's C API.
//
// Completion. Every operation starts a libnexar non-blocking call (`_nb`) and
// returns a WorkNexar that owns the request. Nothing runs a thread per
// operation:
//  - Work::wait() waits for the request on the caller's thread (that thread
//    then drives libnexar's engine itself, the fastest path);
//  - Work::isCompleted() tests it without blocking;
//  - an operation whose future was asked for (getFuture(): DDP's reducer) or
//    whose Work was dropped while in flight is handed to ONE poller thread per
//    process group, which waits for its requests in the order they were
//    handed over and completes their futures. libnexar has no completion
//    callback and no "wait any", so the poller waits in order: a future of a
//    point-to-point receive that never arrives delays the futures handed over
//    after it (collectives, which complete in order, are unaffected).
// A request is claimed by exactly one thread before it is waited (the API's
// "a request is used by one thread at a time").
#pragma once

#include <nexar/nexar.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace nexar_torch {

struct Op;

// The communicator of one process group and its poller thread. Shared by the
// group and its operations, so a Work that outlives the group can still be
// waited (libnexar keeps a request valid after nexar_client_del).
struct Comm {
  nexar_client *c = nullptr;
  nexar_seed *seed = nullptr;  // group rank 0 serves discovery for the group's lifetime
  nexar_client *ctl = nullptr; // same ranks, own tag space: monitoredBarrier's messages
  int rank = 0, size = 0;

  ~Comm();
  // Hands op to the poller (started on first use); false once shut down.
  bool enqueue(std::shared_ptr<Op> op);
  // Waits for every handed-over op, then stops the poller. Idempotent.
  void shutdown();
  // nexar_abort on the communicator (pending and later calls fail ABORTED).
  void abort();

private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Op>> q_;
  bool stop_ = false, started_ = false, deleted_ = false;
  std::thread thr_;
};

// One operation in flight.
struct Op {
  enum State { PENDING, CLAIMED, DONE };

  std::shared_ptr<Comm> comm;
  const char *name = "";
  nexar_request *req = nullptr;    // a libnexar request, or
  std::function<int()> blocking;   // a blocking call run by whoever waits (recvAnysource)
  std::function<void()> post;      // after success: copy out of staging buffers
  std::vector<at::Tensor> keep;    // every buffer the request may touch
  std::vector<at::Tensor> outputs; // the future's value
  c10::intrusive_ptr<c10::ivalue::Future> future;
  // the operation's own timeout (from its options when they set one), or none
  std::chrono::steady_clock::time_point deadline{};
  bool has_deadline = false;
  std::chrono::milliseconds timeout{0};
  int source_rank = -1;
  std::deque<std::vector<size_t>> arrays; // count arrays the request reads
  const size_t *hold(std::vector<size_t> v) {
    arrays.push_back(std::move(v));
    return arrays.back().data();
  }

  std::mutex mu;
  std::condition_variable cv;
  State state = PENDING;
  std::exception_ptr error;

  // Claims the op if it is pending and waits for it on this thread; if
  // another thread holds it, waits for that one. wait_for 0: no limit; else
  // returns false if the op was still running after wait_for (it stays
  // pending). Never throws.
  bool wait(std::chrono::milliseconds wait_for);
  // Non-blocking: true once done (completing it here if its request finished).
  bool test();
  // Completes a claimed op with libnexar's result rc (message: why).
  void finish(int rc, const std::string &why);
  // Completes an op that failed to start.
  void fail_now(std::exception_ptr e);

private:
  int run_claimed(std::chrono::milliseconds wait_for, bool *gave_up, std::string *why);
};

class WorkNexar : public c10d::Work {
public:
  WorkNexar(std::shared_ptr<Op> op, int rank, c10d::OpType type);
  ~WorkNexar() override;
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

private:
  std::shared_ptr<Op> op_;
  bool handed_ = false;
};

class ProcessGroupNexar : public c10d::ProcessGroup {
public:
  // Forms the group's nexar world through the store (see formation.cpp).
  ProcessGroupNexar(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupNexar() override;

  const std::string getBackendName() const override {
    return "nexar";
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor> &tensors,
                      const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                       const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &outputSplits,
                                               std::vector<int64_t> &inputSplits,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;
  void monitoredBarrier(const c10d::BarrierOptions &opts, bool waitAllRanks) override;

  std::chrono::milliseconds timeout() const {
    return timeout_;
  }

private:
  // Wraps a started (or failed to start) op in a Work.
  c10::intrusive_ptr<c10d::Work> start(std::shared_ptr<Op> op, c10d::OpType type, int rc,
                                       std::chrono::milliseconds op_timeout);
  std::shared_ptr<Op> new_op(const char *name);

  std::shared_ptr<Comm> comm_;
  std::chrono::milliseconds timeout_;
};

// formation.cpp: forms the communicator of a group through the c10d store.
std::shared_ptr<Comm> form_comm(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                                std::chrono::milliseconds timeout);

// "nexar <op> on rank R of N: <reason>" as a std::runtime_error.
std::exception_ptr make_error(const char *op, int rank, int size, int rc, const std::string &why);

} // namespace nexar_torch
