// Point-to-point operations of ProcessGroupNexar and its monitored barrier.
#include "nexar_pg.hpp"
#include "tensor_util.hpp"

namespace nexar_torch {

using c10d::OpType;

// ------------------------------------------------------------ point-to-point
// torch's int tags map onto libnexar's 2^32 application tags (a negative tag
// wraps); collectives never use that space.

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::send(std::vector<at::Tensor> &tensors, int dst,
                                                       int tag) {
  const char *name = "send";
  at::Tensor t = single(tensors, name);
  TORCH_CHECK(dst >= 0 && dst < size_, "nexar send: destination ", dst, " is outside the group of ",
              size_);
  map_dtype(t, name);
  auto op = new_op(name);
  at::Tensor buf = dense(t);
  op->keep = {buf};
  op->outputs = {t};
  int rc = nexar_send_nb(comm_->c, ptr(buf), nbytes(buf), (uint32_t)dst, (uint32_t)tag, &op->req);
  return start(op, OpType::SEND, rc, std::chrono::milliseconds(-1));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::recv(std::vector<at::Tensor> &tensors, int src,
                                                       int tag) {
  const char *name = "recv";
  at::Tensor t = single(tensors, name);
  TORCH_CHECK(src >= 0 && src < size_, "nexar recv: source ", src, " is outside the group of ",
              size_);
  map_dtype(t, name);
  auto op = new_op(name);
  at::Tensor buf = dense(t);
  op->keep = {buf};
  op->outputs = {t};
  op->source_rank = src;
  if (!buf.is_same(t)) op->post = [t, buf]() mutable { t.copy_(buf); };
  int rc = nexar_recv_nb(comm_->c, ptr(buf), nbytes(buf), (uint32_t)src, (uint32_t)tag, &op->req);
  return start(op, OpType::RECV, rc, std::chrono::milliseconds(-1));
}

// libnexar has no receive from any source; probe_any (the earliest message
// with the tag from any rank) then a receive from that rank. The probe
// blocks, so this op runs when it is waited (or on the poller if its future
// is asked for or it is polled); a concurrent receive of the same tag may take
// the probed message first.
c10::intrusive_ptr<c10d::Work> ProcessGroupNexar::recvAnysource(std::vector<at::Tensor> &tensors,
                                                                int tag) {
  const char *name = "recvAnysource";
  at::Tensor t = single(tensors, name);
  map_dtype(t, name);
  auto op = new_op(name);
  at::Tensor buf = dense(t);
  op->keep = {buf};
  op->outputs = {t};
  if (!buf.is_same(t)) op->post = [t, buf]() mutable { t.copy_(buf); };
  Op *raw = op.get();
  nexar_client *c = comm_->c;
  op->blocking = [raw, c, buf, tag]() {
    uint32_t src = 0;
    size_t len = 0;
    int rc = nexar_probe_any(c, (uint32_t)tag, &src, &len);
    if (rc) return rc;
    rc = nexar_recv(c, ptr(buf), nbytes(buf), src, (uint32_t)tag);
    if (!rc) raw->source_rank = (int)src;
    return rc;
  };
  return start(op, OpType::RECVANYSOURCE, 0, std::chrono::milliseconds(-1));
}

// Gloo's monitored barrier: every other rank reports to rank 0 and waits for
// its release; rank 0 waits up to the timeout and names the ranks that did not
// arrive (the first, or all with waitAllRanks). The messages go over the
// group's control communicator (same ranks, its own tags), so user tags are
// untouched. A receive that timed out cannot be withdrawn: the control
// communicator is then aborted (later monitored barriers of the group fail),
// the group itself stays usable.
void ProcessGroupNexar::monitoredBarrier(const c10d::BarrierOptions &opts, bool waitAllRanks) {
  using clock = std::chrono::steady_clock;
  auto limit = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  auto deadline = clock::now() + limit;
  nexar_client *ctl = comm_->ctl;
  const uint32_t kArrive = 1, kRelease = 2;
  uint8_t byte = 1;
  auto fail = [&](int rc, const std::string &why) {
    std::rethrow_exception(make_error("monitoredBarrier", rank_, size_, rc, why));
  };
  // polls a request until done or the deadline; false at the deadline
  auto poll = [&](nexar_request *req) {
    auto nap = std::chrono::microseconds(20);
    for (;;) {
      int done = 0;
      if (nexar_test(req, &done) != 0 || done) return true;
      if (clock::now() >= deadline) return false;
      std::this_thread::sleep_for(nap);
      if (nap < std::chrono::microseconds(2000)) nap *= 2;
    }
  };
  if (rank_ != 0) {
    int rc = nexar_send(ctl, &byte, 1, 0, kArrive);
    if (rc) fail(rc, nexar_last_error());
    nexar_request *req = nullptr;
    uint8_t in = 0;
    if ((rc = nexar_recv_nb(ctl, &in, 1, 0, kRelease, &req))) fail(rc, nexar_last_error());
    if (!poll(req)) {
      nexar_abort(ctl);
      nexar_wait(req);
      fail(NEXAR_ERR_TIMEOUT,
           "rank 0 did not release the barrier within " + std::to_string(limit.count()) + " ms");
    }
    if ((rc = nexar_wait(req))) fail(rc, nexar_last_error());
    return;
  }
  std::vector<nexar_request *> reqs((size_t)size_, nullptr);
  std::vector<uint8_t> in((size_t)size_, 0);
  for (int r = 1; r < size_; r++) {
    int rc = nexar_recv_nb(ctl, &in[r], 1, (uint32_t)r, kArrive, &reqs[r]);
    if (rc) {
      nexar_abort(ctl);
      for (auto *q : reqs)
        if (q) nexar_wait(q);
      fail(rc, nexar_last_error());
    }
  }
  // A rank whose arrival did not come failed to pass, whether the receive
  // timed out or ended early: another waiting rank that gave up first aborts
  // the control communicator, and rank 0 must still name the late ones.
  std::vector<int> missing;
  std::string why;
  for (int r = 1; r < size_; r++) {
    bool came = poll(reqs[r]);
    if (came) {
      int rc = nexar_wait(reqs[r]);
      reqs[r] = nullptr;
      if (rc) {
        came = false;
        if (why.empty()) why = nexar_last_error();
      }
    }
    if (!came) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  bool left = false;
  for (auto *q : reqs)
    left = left || q;
  if (left) { // timed out ones (and the unpolled rest) cannot be withdrawn
    nexar_abort(ctl);
    for (auto *&q : reqs)
      if (q) nexar_wait(q), q = nullptr;
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    fail(NEXAR_ERR_TIMEOUT, std::string(missing.size() > 1 ? "Ranks " : "Rank ") + ranks +
                                " failed to pass monitoredBarrier in " +
                                std::to_string(limit.count()) + " ms" +
                                (why.empty() ? "" : " (" + why + ")"));
  }
  for (int r = 1; r < size_; r++) {
    int rc = nexar_send(ctl, &byte, 1, (uint32_t)r, kRelease);
    if (rc) fail(rc, nexar_last_error());
  }
}

} // namespace nexar_torch
