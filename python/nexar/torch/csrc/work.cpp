// Operations in flight, their Work objects and the group's poller thread.
#include "nexar_pg.hpp"

#include <stdexcept>

namespace nexar_torch {

std::exception_ptr make_error(const char *op, int rank, int size, int rc, const std::string &why) {
  std::string msg = std::string("nexar ") + op + " on rank " + std::to_string(rank) + " of " +
                    std::to_string(size) + " failed (" + nexar_strerror(rc) + "): " + why;
  return std::make_exception_ptr(std::runtime_error(msg));
}

// ---------------------------------------------------------------- Comm

Comm::~Comm() {
  shutdown();
  if (ctl) nexar_client_del(ctl);
  if (c) nexar_client_del(c);
  if (seed) nexar_seed_del(seed);
}

bool Comm::enqueue(std::shared_ptr<Op> op) {
  std::lock_guard<std::mutex> g(mu_);
  if (stop_) return false;
  if (!started_) {
    thr_ = std::thread([this] { run(); });
    started_ = true;
  }
  q_.push_back(std::move(op));
  cv_.notify_one();
  return true;
}

void Comm::run() {
  for (;;) {
    std::shared_ptr<Op> op;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !q_.empty(); });
      if (q_.empty()) return; // stopping, and everything handed over is done
      op = std::move(q_.front());
      q_.pop_front();
    }
    op->wait(std::chrono::milliseconds(0));
  }
}

void Comm::shutdown() {
  std::thread t;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
    cv_.notify_all();
    if (!started_) return;
    t = std::move(thr_);
    started_ = false;
  }
  if (t.joinable()) {
    if (t.get_id() == std::this_thread::get_id())
      t.detach(); // the last reference went away on the poller itself: it exits after this op
    else
      t.join();
  }
}

void Comm::abort() {
  if (c) nexar_abort(c);
}

// ---------------------------------------------------------------- Op

void Op::fail_now(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> g(mu);
    state = DONE;
    error = e;
    keep.clear();
    cv.notify_all();
  }
  if (future && !future->completed()) future->setError(e);
}

void Op::finish(int rc, const std::string &why) {
  std::exception_ptr e;
  if (rc) {
    e = make_error(name, comm->rank, comm->size, rc, why);
  } else if (post) {
    try {
      post();
    } catch (...) {
      e = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> g(mu);
    state = DONE;
    error = e;
    req = nullptr;
    keep.clear();
    post = nullptr;
    blocking = nullptr;
    cv.notify_all();
  }
  if (future && !future->completed()) {
    if (e)
      future->setError(e);
    else
      future->markCompleted(c10::IValue(outputs));
  }
}

// Runs the claimed request. With a deadline (the op's own timeout, or the
// caller's wait limit) it polls with nexar_test; libnexar cannot cancel one
// request, so when the op's own timeout passes the communicator is aborted
// (as NCCL's watchdog does) and the request then completes with ABORTED.
int Op::run_claimed(std::chrono::milliseconds wait_for, bool *gave_up, std::string *why) {
  using clock = std::chrono::steady_clock;
  *gave_up = false;
  if (blocking) {
    int rc = blocking();
    if (rc) *why = nexar_last_error();
    return rc;
  }
  bool limit = wait_for.count() > 0;
  if (!has_deadline && !limit) {
    int rc = nexar_wait(req);
    if (rc) *why = nexar_last_error();
    return rc;
  }
  auto until = limit ? clock::now() + wait_for : deadline;
  bool op_deadline_first = has_deadline && (!limit || deadline <= until);
  if (op_deadline_first) until = deadline;
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    int rc = nexar_test(req, &done);
    if (rc || done) {
      rc = nexar_wait(req);
      if (rc) *why = nexar_last_error();
      return rc;
    }
    if (clock::now() >= until) {
      if (!op_deadline_first) {
        *gave_up = true;
        return 0;
      }
      comm->abort();
      nexar_wait(req);
      *why = std::string("no completion within the operation's timeout of ") +
             std::to_string(timeout.count()) + " ms; the process group is aborted";
      return NEXAR_ERR_TIMEOUT;
    }
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::microseconds(1000)) nap *= 2;
  }
}

bool Op::wait(std::chrono::milliseconds wait_for) {
  std::unique_lock<std::mutex> l(mu);
  if (state == DONE) return true;
  if (state == CLAIMED) {
    if (wait_for.count() > 0) return cv.wait_for(l, wait_for, [this] { return state == DONE; });
    cv.wait(l, [this] { return state == DONE; });
    return true;
  }
  state = CLAIMED;
  l.unlock();
  bool gave_up = false;
  std::string why;
  int rc = run_claimed(wait_for, &gave_up, &why);
  if (gave_up) {
    std::lock_guard<std::mutex> g(mu);
    state = PENDING;
    cv.notify_all();
    return false;
  }
  finish(rc, why);
  return true;
}

bool Op::test() {
  std::unique_lock<std::mutex> l(mu);
  if (state == DONE) return true;
  if (state == CLAIMED || blocking) return false;
  int done = 0;
  if (nexar_test(req, &done) != 0) done = 1; // the wait reports the error
  if (!done) return false;
  state = CLAIMED;
  l.unlock();
  std::string why;
  int rc = nexar_wait(req);
  if (rc) why = nexar_last_error();
  finish(rc, why);
  return true;
}

// ---------------------------------------------------------------- WorkNexar

WorkNexar::WorkNexar(std::shared_ptr<Op> op, int rank, c10d::OpType type)
    : c10d::Work(rank, type), op_(std::move(op)) {}

WorkNexar::~WorkNexar() {
  // Dropped while in flight: the poller (or, once the group is gone, this
  // thread) waits, so no buffer is released while libnexar may touch it.
  std::unique_lock<std::mutex> l(op_->mu);
  bool pending = op_->state != Op::DONE;
  l.unlock();
  if (pending && !handed_ && !op_->comm->enqueue(op_)) op_->wait(std::chrono::milliseconds(0));
}

bool WorkNexar::isCompleted() {
  if (op_->test()) return true;
  if (op_->blocking && !handed_) { // a lazy op polled for completion: the poller runs it
    handed_ = op_->comm->enqueue(op_);
  }
  return false;
}

bool WorkNexar::isSuccess() const {
  std::lock_guard<std::mutex> g(op_->mu);
  return op_->state == Op::DONE && !op_->error;
}

std::exception_ptr WorkNexar::exception() const {
  std::lock_guard<std::mutex> g(op_->mu);
  return op_->error;
}

int WorkNexar::sourceRank() const {
  std::lock_guard<std::mutex> g(op_->mu);
  TORCH_CHECK(op_->state == Op::DONE, "nexar: sourceRank() of a receive that has not completed");
  return op_->source_rank;
}

std::vector<at::Tensor> WorkNexar::result() {
  return op_->outputs;
}

bool WorkNexar::wait(std::chrono::milliseconds timeout) {
  if (!op_->wait(timeout)) {
    TORCH_CHECK(false, "nexar ", op_->name, ": Work.wait timed out after ", timeout.count(),
                " ms; the operation is still in flight");
  }
  std::exception_ptr e = exception();
  if (e) std::rethrow_exception(e);
  return true;
}

void WorkNexar::abort() {
  op_->comm->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> WorkNexar::getFuture() {
  std::unique_lock<std::mutex> l(op_->mu);
  bool pending = op_->state != Op::DONE;
  l.unlock();
  if (pending && !handed_ && op_->comm->enqueue(op_)) handed_ = true;
  if (pending && !handed_) op_->wait(std::chrono::milliseconds(0)); // group gone: wait here
  return op_->future;
}

} // namespace nexar_torch
