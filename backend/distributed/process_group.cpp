#include "distributed/process_group.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "distributed/schedules.h"
#include "distributed/transport.h"
#include "runtime/derived.h"
#include "runtime/driver.h"
#include "runtime/launch.h"
#include "runtime/streams.h"

namespace spyre::distributed {

using backend::driver_device;

// One collective (or one side of a send/recv) on this rank: the device tensors whose
// bytes it reads and writes, what it sends to each peer and how it makes its outputs
// from what it received. Runs in run_op, when the stream's queue reaches it.
struct ProcessGroupSpyre::Op {
  std::shared_ptr<Transport> transport;
  std::string key, name;
  std::vector<int> send_to;        // the ranks it sends a message to
  std::vector<int> receive_from;   // the ranks it waits for a message from
  std::vector<bool> writes;        // per tensor: whether the op writes it
  std::vector<at::Tensor> tensors; // kept alive until the op has run
  std::vector<int> view_index;     // tensor -> index of its view (-1: empty tensor)
  std::function<std::string(int peer, void* const* views)> outgoing;
  std::function<void(void* const* views, std::vector<std::string>& incoming)> finish;
  std::uint64_t duration_ps = 0;
  // When the modelled time depends on what every rank sends (an uneven all-to-all),
  // it is computed once everything has arrived, from the same data on every rank.
  std::function<std::uint64_t(const std::vector<std::string>& incoming)> timing;
  std::uint64_t sent_bytes = 0;  // with `timing`: the bytes this card sends
  std::vector<spyre_link_transfer_t> own_transfers;  // with `timing`: what this card sends, for the report
  std::atomic<bool> done{false};
  std::atomic<bool> failed{false};
};

namespace {

using Op = ProcessGroupSpyre::Op;

std::uint64_t nbytes(const at::Tensor& t) { return static_cast<std::uint64_t>(t.numel()) * t.element_size(); }

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "spyre process group: ", what,
              ": expected a spyre tensor, found one on ", t.device());
  TORCH_CHECK(t.is_contiguous(), "spyre process group: ", what, ": expected a contiguous tensor, found strides ",
              t.strides());
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type() && a.device() == b.device(), "spyre process group: ", what,
              ": expected tensors of one dtype and device, found ", a.scalar_type(), " on ", a.device(), " and ",
              b.scalar_type(), " on ", b.device());
}

std::string bytes_of(const void* p, std::uint64_t n) {
  return n == 0 ? std::string() : std::string(static_cast<const char*>(p), n);
}

void put(void* dst, const std::string& src, std::uint64_t expected, int from) {
  if (src.size() != expected) {
    throw std::runtime_error("expected " + std::to_string(expected) + " bytes from rank " + std::to_string(from) +
                             ", received " + std::to_string(src.size()) + " (do the ranks' tensors agree in size?)");
  }
  if (expected > 0) std::memcpy(dst, src.data(), expected);
}

at::Tensor cpu_view(const void* p, const at::Tensor& like) {
  return at::from_blob(const_cast<void*>(p), like.sizes(), at::TensorOptions().dtype(like.scalar_type()));
}

void check_reduce_op(const c10d::ReduceOp& op, const at::Tensor& t) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      return;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "spyre process group: ReduceOp.AVG expects a floating-point "
                  "tensor, found ", t.scalar_type());
      return;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(at::isIntegralType(t.scalar_type(), true), "spyre process group: bitwise reductions expect an "
                  "integer tensor, found ", t.scalar_type());
      return;
    default:
      TORCH_CHECK(false, "spyre process group: unsupported ReduceOp ", static_cast<int>(op.op_),
                  " (expected SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR)");
  }
}

// The values of all ranks (rank order) folded into `out`, as the CPU folds them.
void reduce_into(const c10d::ReduceOp& op, void* out, const at::Tensor& like, int size,
                 const std::function<const void*(int rank)>& data) {
  at::Tensor acc = cpu_view(data(0), like).clone();
  for (int k = 1; k < size; ++k) {
    const at::Tensor x = cpu_view(data(k), like);
    switch (op.op_) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::AVG: acc.add_(x); break;
      case c10d::ReduceOp::PRODUCT: acc.mul_(x); break;
      case c10d::ReduceOp::MIN: at::minimum_out(acc, acc, x); break;
      case c10d::ReduceOp::MAX: at::maximum_out(acc, acc, x); break;
      case c10d::ReduceOp::BAND: acc.bitwise_and_(x); break;
      case c10d::ReduceOp::BOR: acc.bitwise_or_(x); break;
      case c10d::ReduceOp::BXOR: acc.bitwise_xor_(x); break;
      default: throw std::runtime_error("unsupported ReduceOp");
    }
  }
  if (op.op_ == c10d::ReduceOp::AVG) acc.div_(size);
  cpu_view(out, like).copy_(acc);
}

std::mutex g_live_mutex;
std::vector<std::shared_ptr<Op>>& live_ops() {
  // Ops stay alive until they have run, whoever holds their Work; never freed with the
  // process group, since the queue may reach one after the group is gone.
  static auto* ops = new std::vector<std::shared_ptr<Op>>();
  return *ops;
}

// The arrival time that marks a message as "the sender failed this op" (its payload
// says why), so a failure on one rank fails its peers at once instead of at the timeout.
constexpr std::uint64_t kAborted = ~std::uint64_t{0};

void abort_peers(Op& op, const std::string& reason) {
  std::vector<int> peers = op.send_to;
  peers.insert(peers.end(), op.receive_from.begin(), op.receive_from.end());
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  for (const int peer : peers) {
    try {
      op.transport->send(peer, op.key, kAborted, reason);
    } catch (const std::exception&) {
      // The peer is gone already: it fails on its own.
    }
  }
}

int run_op(void* user, uint64_t arrival_ps, void* const* views, uint64_t* end_ps, char* message, size_t size) {
  Op& op = *static_cast<Op*>(user);
  if (views == nullptr) {
    // Skipped: an earlier command of the queue faulted. The peers are told, so they
    // fail now rather than wait for this rank until the timeout.
    abort_peers(op, "rank " + std::to_string(op.transport->rank()) + " skipped it: an earlier command of its stream "
                    "faulted");
    op.failed = true;
    op.done = true;
    return 0;
  }
  try {
    std::vector<void*> v(op.tensors.size(), nullptr);
    for (std::size_t i = 0; i < op.tensors.size(); ++i) {
      if (op.view_index[i] >= 0) v[i] = views[op.view_index[i]];
    }
    for (const int peer : op.send_to) {
      op.transport->send(peer, op.key, arrival_ps, op.outgoing ? op.outgoing(peer, v.data()) : std::string());
    }
    std::vector<std::string> incoming(static_cast<std::size_t>(op.transport->size()));
    std::uint64_t latest = arrival_ps;
    for (const int peer : op.receive_from) {
      Message m = op.transport->receive(peer, op.key);
      if (m.arrival_ps == kAborted) throw std::runtime_error("rank " + std::to_string(peer) + " failed it: " + m.payload);
      latest = std::max(latest, m.arrival_ps);
      incoming[static_cast<std::size_t>(peer)] = std::move(m.payload);
    }
    if (op.timing) op.duration_ps = op.timing(incoming);
    if (op.finish) op.finish(v.data(), incoming);
    // Conservative: the collective starts when the last rank has arrived.
    *end_ps = latest + op.duration_ps;
    op.done = true;
    return 0;
  } catch (const std::exception& e) {
    abort_peers(op, e.what());
    std::snprintf(message, size, "%s", e.what());
    op.failed = true;
    op.done = true;
    return 1;
  }
}

class SpyreWork final : public c10d::Work {
 public:
  SpyreWork(int rank, c10d::OpType type, std::shared_ptr<Op> op, c10::Stream stream, spyre_event_t event,
            std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), op_(std::move(op)), stream_(stream), queue_(backend::queue_of(stream)), event_(event),
        outputs_(std::move(outputs)) {}
  ~SpyreWork() override { spyreEventDestroy(event_); }

  bool isCompleted() override { return spyreEventQuery(event_) == SPYRE_SUCCESS; }
  bool isSuccess() const override { return !op_->failed; }
  // Blocks until the collective (and the stream's work before it) has completed; a
  // failure (a peer gone, sizes that disagree, a timeout) raises with its reason.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    backend::synchronize_queue(queue_, op_->name.c_str());
    return true;
  }
  void synchronize() override { wait(kNoTimeout); }
  std::vector<at::Tensor> result() override { return outputs_; }
  // Stream-ordered, as CUDA's futures are: completed at once with an event on the
  // collective stream, which whoever uses the value (its current stream) waits for.
  // DDP takes its buckets' all-reduces this way, so the backward goes on meanwhile. A
  // collective that fails then leaves the collective stream in error: the group's next
  // collective (or a wait() on this one) raises its reason.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                           std::vector<c10::Device>{stream_.device()});
    const c10::StreamGuard guard(stream_);
    future->markCompleted(c10::IValue(outputs_));
    return future;
  }

 private:
  std::shared_ptr<Op> op_;
  c10::Stream stream_;
  spyre_queue_t queue_;
  spyre_event_t event_;
  std::vector<at::Tensor> outputs_;
};

// Where the rank listens: SPYRE_C10D_ADDR, else the loopback address when the store is
// on this machine (MASTER_ADDR unset or local), else every interface ("*").
std::string listen_address() {
  if (const char* a = std::getenv("SPYRE_C10D_ADDR"); a != nullptr && *a != '\0') return a;
  const char* master = std::getenv("MASTER_ADDR");
  const std::string m = master != nullptr ? master : "";
  if (m.empty() || m == "localhost" || m.rfind("127.", 0) == 0) return "127.0.0.1";
  return "*";
}

std::function<std::uint64_t(const std::vector<std::string>&)> all_to_all_timing(spyre_device_t device, int rank,
                                                                               std::vector<std::uint64_t> own) {
  return [device, rank, own = std::move(own)](const std::vector<std::string>& incoming) {
    const int n = static_cast<int>(incoming.size());
    std::vector<std::vector<std::uint64_t>> matrix(n);
    for (int k = 0; k < n; ++k) matrix[k] = k == rank ? own : sizes_of(incoming[k], n);
    const FlatSchedule flat = flatten(all_to_all(matrix));
    std::uint64_t d = 0;
    if (n > 1 && spyreSystemScheduleTime(device, static_cast<uint32_t>(n), flat.transfers.data(), flat.counts.data(),
                                         static_cast<uint32_t>(flat.counts.size()), &d) != SPYRE_SUCCESS) {
      throw std::runtime_error(std::string("timing the all-to-all: ") + spyreGetLastErrorMessage());
    }
    return d;
  };
}

}  // namespace

ProcessGroupSpyre::ProcessGroupSpyre(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size) {
  auto publish = [&](const std::string& key, const std::string& value) {
    store->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  };
  auto lookup = [&](const std::string& key) {
    const auto v = store->get(key);
    return std::string(v.begin(), v.end());
  };
  std::string address = listen_address();
  if (address == "*") {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    // Bind every interface; peers reach this one by its host name.
    transport_ = std::make_shared<Transport>(
        rank, size, "0.0.0.0",
        [&](const std::string& key, const std::string& value) {
          // The address ("0.0.0.0:port") as this host's name and the port; other keys as they are.
          const bool address = key.find('/') == key.rfind('/') && value.rfind("0.0.0.0:", 0) == 0;
          publish(key, address ? std::string(host) + value.substr(value.rfind(':')) : value);
        },
        lookup, timeout);
  } else {
    transport_ = std::make_shared<Transport>(rank, size, address, publish, lookup, timeout);
  }
  // Every rank must simulate the same system, or their collectives' end times differ.
  spyre_device_properties_t props{};
  props.struct_size = sizeof props;
  SPYRE_CHECK(spyreDeviceGetProperties(driver_device(backend::current_device()), &props));
  const std::string mine = fmt::format("{} ({})", props.config_hash, props.config_name);
  publish(fmt::format("spyre_c10d/config/{}", rank), mine);
  const std::string first = lookup("spyre_c10d/config/0");
  TORCH_CHECK(mine == first, "spyre process group: rank ", rank, " simulates the chip config ", mine, ", rank 0 ",
              first, ": every rank needs the same config (SPYRE_SIM_CONFIG, SPYRE_SIM_SET) for the ranks to agree on "
              "their collectives' times");
}

ProcessGroupSpyre::~ProcessGroupSpyre() {
  for (const auto& [device, event] : ready_) spyreEventDestroy(event);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupSpyre::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupSpyre>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}


c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::submit(std::shared_ptr<Op> op, c10d::OpType type,
                                                         const Schedule& schedule, std::vector<at::Tensor> outputs,
                                                         bool writes_outputs) {
  // A collective's key is the group's next sequence number, taken only once it is
  // queued, so a call refused on this rank does not shift its later collectives' keys
  // against the other ranks'. (Send and recv come with their own keys.)
  const bool collective = op->key.empty();
  if (collective) op->key = "c" + std::to_string(sequence_);
  const c10::DeviceIndex device =
      op->tensors.empty() ? backend::current_device() : op->tensors.front().device().index();
  for (const auto& t : op->tensors) {
    TORCH_CHECK(t.device().index() == device, "spyre process group: ", op->name,
                ": expected every tensor on spyre:", device, ", found one on ", t.device());
  }
  // The modelled time and the bytes this card sends.
  const std::uint64_t sent = size_ > 1 ? sent_by(schedule, rank_) : 0;
  const FlatSchedule flat = size_ > 1 ? flatten(schedule) : FlatSchedule{};
  if (size_ > 1) {
    SPYRE_CHECK(spyreSystemScheduleTime(driver_device(device), static_cast<uint32_t>(size_), flat.transfers.data(),
                                        flat.counts.data(), static_cast<uint32_t>(flat.counts.size()),
                                        &op->duration_ps));
  }
  std::vector<void*> buffers;
  std::vector<size_t> sizes;
  for (const auto& t : op->tensors) {
    if (t.numel() == 0) {
      op->view_index.push_back(-1);
      continue;
    }
    op->view_index.push_back(static_cast<int>(buffers.size()));
    buffers.push_back(t.data_ptr());
    sizes.push_back(nbytes(t));
  }
  op->transport = transport_;
  // On the collective stream, after what the current stream has queued (the inputs'
  // producers, the outputs' last users); the tensors stay in use on the collective
  // stream until it has run (the caching allocator hands their memory on only then).
  const c10::Stream stream = collective_stream(device);
  const spyre_queue_t queue = backend::queue_of(stream);
  {
    const spyre_event_t ready = ready_event(device);
    SPYRE_CHECK(spyreEventRecord(ready, backend::queue_of(backend::current_stream(device))));
    SPYRE_CHECK(spyreQueueWaitEvent(queue, ready));
  }
  const c10::impl::VirtualGuardImpl guard_impl(c10::DeviceType::PrivateUse1);
  for (const auto& t : op->tensors) {
    if (t.numel() > 0) guard_impl.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
  spyre_external_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.name = op->name.c_str();
  desc.buffers = buffers.data();
  desc.sizes = sizes.data();
  desc.num_buffers = static_cast<uint32_t>(buffers.size());
  desc.fn = run_op;
  desc.user = op.get();
  desc.bytes = op->timing ? op->sent_bytes : sent;
  // The transfers, for the report's bytes per link (the driver counts this card's).
  const std::vector<spyre_link_transfer_t>& transfers = op->timing ? op->own_transfers : flat.transfers;
  if (size_ > 1 && !transfers.empty()) {
    desc.card = static_cast<uint32_t>(rank_);
    desc.cards = static_cast<uint32_t>(size_);
    desc.transfers = transfers.data();
    desc.num_transfers = static_cast<uint32_t>(transfers.size());
  }
  {
    const std::lock_guard lock(g_live_mutex);
    auto& live = live_ops();
    std::erase_if(live, [](const auto& o) { return o->done.load(); });
    live.push_back(op);
  }
  // The work writes device memory behind the backend's back: what was derived from
  // the written storages is stale (runtime/derived.h), and held-back launches go first.
  backend::flush_deferred();
  if (writes_outputs) {
    for (const auto& t : outputs) {
      if (t.numel() > 0) backend::derived::note_write(t.data_ptr());
    }
  }
  SPYRE_CHECK(spyreQueueExternal(queue, &desc));
  if (collective) ++sequence_;
  spyre_event_t event = nullptr;
  SPYRE_CHECK(spyreEventCreate(driver_device(device), &event));
  SPYRE_CHECK(spyreEventRecord(event, queue));
  return c10::make_intrusive<SpyreWork>(rank_, type, op, stream, event, std::move(outputs));
}

spyre_event_t ProcessGroupSpyre::ready_event(c10::DeviceIndex device) {
  const auto it = ready_.find(device);
  if (it != ready_.end()) return it->second;
  spyre_event_t event = nullptr;
  SPYRE_CHECK(spyreEventCreate(driver_device(device), &event));
  return ready_.emplace(device, event).first->second;
}

c10::Stream ProcessGroupSpyre::collective_stream(c10::DeviceIndex device) {
  const auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  return streams_.emplace(device, backend::stream_from_pool(device, /*high_priority=*/true)).first->second;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "spyre process group: all_reduce expects one tensor per rank, found ",
              tensors.size());
  const at::Tensor t = tensors[0];
  check_tensor(t, "all_reduce");
  check_reduce_op(opts.reduceOp, t);
  auto op = std::make_shared<Op>();
  op->name = "all_reduce";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {t};
  const std::uint64_t n = nbytes(t);
  const int rank = rank_, size = size_;
  op->outgoing = [n](int, void* const* v) { return bytes_of(v[0], n); };
  op->finish = [=, reduce = opts.reduceOp](void* const* v, std::vector<std::string>& in) {
    for (int k = 0; k < size; ++k) {
      if (k != rank && in[k].size() != n) put(nullptr, in[k], n, k);  // raises the size mismatch
    }
    if (n == 0) return;
    reduce_into(reduce, v[0], t, size, [&](int k) -> const void* { return k == rank ? v[0] : in[k].data(); });
  };
  // Ring all-reduce: reduce-scatter then all-gather, 2(N - 1) steps of S / N.
  return submit(op, c10d::OpType::ALLREDUCE, ring(size_, 2 * (size_ - 1), (n + size_ - 1) / size_), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "spyre process group: broadcast expects one tensor per rank");
  const at::Tensor t = tensors[0];
  check_tensor(t, "broadcast");
  const int root = static_cast<int>(opts.rootRank), rank = rank_;
  auto op = std::make_shared<Op>();
  op->name = "broadcast";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {t};
  const std::uint64_t n = nbytes(t);
  op->outgoing = [=](int, void* const* v) { return rank == root ? bytes_of(v[0], n) : std::string(); };
  op->finish = [=](void* const* v, std::vector<std::string>& in) {
    if (rank != root) put(v[0], in[root], n, root);
  };
  return submit(op, c10d::OpType::BROADCAST, tree(size_, root, n, false), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "spyre process group: reduce expects one tensor per rank");
  const at::Tensor t = tensors[0];
  check_tensor(t, "reduce");
  check_reduce_op(opts.reduceOp, t);
  const int root = static_cast<int>(opts.rootRank), rank = rank_, size = size_;
  auto op = std::make_shared<Op>();
  op->name = "reduce";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {t};
  const std::uint64_t n = nbytes(t);
  op->outgoing = [=](int peer, void* const* v) { return peer == root ? bytes_of(v[0], n) : std::string(); };
  op->finish = [=, reduce = opts.reduceOp](void* const* v, std::vector<std::string>& in) {
    if (rank != root || n == 0) return;
    for (int k = 0; k < size; ++k) {
      if (k != rank && in[k].size() != n) put(nullptr, in[k], n, k);
    }
    reduce_into(reduce, v[0], t, size, [&](int k) -> const void* { return k == rank ? v[0] : in[k].data(); });
  };
  return submit(op, c10d::OpType::REDUCE, tree(size_, root, n, true), {t});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "spyre process group: all_gather expects one input and "
              "one output list per rank");
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "spyre process group: all_gather expects ", size_,
              " output tensors, found ", outputs[0].size());
  const at::Tensor in = inputs[0];
  check_tensor(in, "all_gather input");
  auto op = std::make_shared<Op>();
  op->name = "all_gather";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {in};
  for (const auto& o : outputs[0]) {
    check_tensor(o, "all_gather output");
    check_same(o, in, "all_gather");
    TORCH_CHECK(o.numel() == in.numel(), "spyre process group: all_gather expects outputs of the input's ",
                in.numel(), " elements, found ", o.numel());
    op->tensors.push_back(o);
  }
  const std::uint64_t n = nbytes(in);
  const int rank = rank_, size = size_;
  op->outgoing = [n](int, void* const* v) { return bytes_of(v[0], n); };
  op->finish = [=](void* const* v, std::vector<std::string>& got) {
    for (int k = 0; k < size; ++k) {
      if (k == rank) {
        if (n > 0) std::memcpy(v[1 + k], v[0], n);
      } else {
        put(v[1 + k], got[k], n, k);
      }
    }
  };
  return submit(op, c10d::OpType::ALLGATHER, ring(size_, size_ - 1, n), outputs[0]);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  check_tensor(input, "all_gather_into_tensor input");
  check_tensor(output, "all_gather_into_tensor output");
  check_same(output, input, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * size_, "spyre process group: all_gather_into_tensor expects an output "
              "of ", size_, " x ", input.numel(), " elements, found ", output.numel());
  auto op = std::make_shared<Op>();
  op->name = "all_gather_into_tensor";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {input, output};
  const std::uint64_t n = nbytes(input);
  const int rank = rank_, size = size_;
  op->outgoing = [n](int, void* const* v) { return bytes_of(v[0], n); };
  op->finish = [=](void* const* v, std::vector<std::string>& got) {
    auto* out = static_cast<char*>(v[1]);
    for (int k = 0; k < size; ++k) {
      if (k == rank) {
        if (n > 0) std::memcpy(out + k * n, v[0], n);
      } else {
        put(out + k * n, got[k], n, k);
      }
    }
  };
  return submit(op, c10d::OpType::_ALLGATHER_BASE, ring(size_, size_ - 1, n), {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "spyre process group: gather expects one input per rank");
  const at::Tensor in = inputs[0];
  check_tensor(in, "gather input");
  const int root = static_cast<int>(opts.rootRank), rank = rank_, size = size_;
  auto op = std::make_shared<Op>();
  op->name = "gather";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {in};
  if (rank == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "spyre process group: gather "
                "expects ", size_, " output tensors on the root");
    for (const auto& o : outputs[0]) {
      check_tensor(o, "gather output");
      check_same(o, in, "gather");
      TORCH_CHECK(o.numel() == in.numel(), "spyre process group: gather expects outputs of the input's size");
      op->tensors.push_back(o);
    }
  }
  const std::uint64_t n = nbytes(in);
  op->outgoing = [=](int peer, void* const* v) { return peer == root ? bytes_of(v[0], n) : std::string(); };
  op->finish = [=](void* const* v, std::vector<std::string>& got) {
    if (rank != root) return;
    for (int k = 0; k < size; ++k) {
      if (k == rank) {
        if (n > 0) std::memcpy(v[1 + k], v[0], n);
      } else {
        put(v[1 + k], got[k], n, k);
      }
    }
  };
  std::vector<at::Tensor> results = rank == root ? outputs[0] : std::vector<at::Tensor>{};
  return submit(op, c10d::OpType::GATHER, star(size_, root, [n](int) { return n; }, true), results);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "spyre process group: scatter expects one output per rank");
  const at::Tensor out = outputs[0];
  check_tensor(out, "scatter output");
  const int root = static_cast<int>(opts.rootRank), rank = rank_;
  auto op = std::make_shared<Op>();
  op->name = "scatter";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {out};
  if (rank == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "spyre process group: scatter "
                "expects ", size_, " input tensors on the root");
    for (const auto& i : inputs[0]) {
      check_tensor(i, "scatter input");
      check_same(i, out, "scatter");
      TORCH_CHECK(i.numel() == out.numel(), "spyre process group: scatter expects inputs of the output's size");
      op->tensors.push_back(i);
    }
  }
  const std::uint64_t n = nbytes(out);
  op->outgoing = [=](int peer, void* const* v) { return rank == root ? bytes_of(v[1 + peer], n) : std::string(); };
  op->finish = [=](void* const* v, std::vector<std::string>& got) {
    if (rank == root) {
      if (n > 0) std::memcpy(v[0], v[1 + root], n);
    } else {
      put(v[0], got[root], n, root);
    }
  };
  return submit(op, c10d::OpType::SCATTER, star(size_, root, [n](int) { return n; }, false), {out});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "spyre process group: reduce_scatter expects one output and ", size_, " inputs per rank");
  const at::Tensor out = outputs[0];
  check_tensor(out, "reduce_scatter output");
  check_reduce_op(opts.reduceOp, out);
  auto op = std::make_shared<Op>();
  op->name = "reduce_scatter";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {out};
  for (const auto& i : inputs[0]) {
    check_tensor(i, "reduce_scatter input");
    check_same(i, out, "reduce_scatter");
    TORCH_CHECK(i.numel() == out.numel(), "spyre process group: reduce_scatter expects inputs of the output's size");
    op->tensors.push_back(i);
  }
  const std::uint64_t n = nbytes(out);
  const int rank = rank_, size = size_;
  op->outgoing = [=](int peer, void* const* v) { return bytes_of(v[1 + peer], n); };
  op->finish = [=, reduce = opts.reduceOp](void* const* v, std::vector<std::string>& got) {
    for (int k = 0; k < size; ++k) {
      if (k != rank && got[k].size() != n) put(nullptr, got[k], n, k);
    }
    if (n == 0) return;
    reduce_into(reduce, v[0], out, size, [&](int k) -> const void* { return k == rank ? v[1 + rank] : got[k].data(); });
  };
  return submit(op, c10d::OpType::REDUCE_SCATTER, ring(size_, size_ - 1, n), {out});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter_tensor input");
  check_tensor(output, "reduce_scatter_tensor output");
  check_same(output, input, "reduce_scatter_tensor");
  check_reduce_op(opts.reduceOp, output);
  TORCH_CHECK(input.numel() == output.numel() * size_, "spyre process group: reduce_scatter_tensor expects an input "
              "of ", size_, " x ", output.numel(), " elements, found ", input.numel());
  auto op = std::make_shared<Op>();
  op->name = "reduce_scatter_tensor";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {output, input};
  const std::uint64_t n = nbytes(output);
  const int rank = rank_, size = size_;
  op->outgoing = [=](int peer, void* const* v) { return bytes_of(static_cast<char*>(v[1]) + peer * n, n); };
  op->finish = [=, reduce = opts.reduceOp](void* const* v, std::vector<std::string>& got) {
    for (int k = 0; k < size; ++k) {
      if (k != rank && got[k].size() != n) put(nullptr, got[k], n, k);
    }
    if (n == 0) return;
    const char* own = static_cast<const char*>(v[1]) + rank * n;
    reduce_into(reduce, v[0], output, size, [&](int k) -> const void* { return k == rank ? own : got[k].data(); });
  };
  return submit(op, c10d::OpType::_REDUCE_SCATTER_BASE, ring(size_, size_ - 1, n), {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  check_tensor(input, "all_to_all_single input");
  check_tensor(output, "all_to_all_single output");
  check_same(output, input, "all_to_all_single");
  const int size = size_, rank = rank_;
  // Rows of dim 0 per rank: the splits given, else equal shares.
  const auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
    std::vector<std::uint64_t> offsets(size + 1, 0);
    const std::int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
    const std::uint64_t row_bytes = dim0 == 0 ? 0 : nbytes(t) / static_cast<std::uint64_t>(dim0);
    if (splits.empty()) {
      TORCH_CHECK(dim0 % size == 0, "spyre process group: all_to_all_single ", what, ": ", dim0,
                  " rows do not split evenly over ", size, " ranks; give split sizes");
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == size, "spyre process group: all_to_all_single ", what,
                  " split sizes: expected ", size, ", found ", splits.size());
    }
    std::int64_t total = 0;
    for (int k = 0; k < size; ++k) {
      const std::int64_t r = splits.empty() ? dim0 / size : splits[k];
      total += r;
      offsets[k + 1] = offsets[k] + static_cast<std::uint64_t>(r) * row_bytes;
    }
    TORCH_CHECK(total == dim0, "spyre process group: all_to_all_single ", what, " split sizes add up to ", total,
                ", the tensor has ", dim0, " rows");
    return offsets;
  };
  const auto in_off = rows(input, input_splits, "input");
  const auto out_off = rows(output, output_splits, "output");
  auto op = std::make_shared<Op>();
  op->name = "all_to_all_single";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  op->tensors = {input, output};
  std::vector<std::uint64_t> sends;
  for (int k = 0; k < size; ++k) sends.push_back(k == rank ? 0 : in_off[k + 1] - in_off[k]);
  op->outgoing = [=](int peer, void* const* v) {
    return with_sizes(sends, bytes_of(static_cast<const char*>(v[0]) + in_off[peer], in_off[peer + 1] - in_off[peer]));
  };
  op->finish = [=](void* const* v, std::vector<std::string>& got) {
    auto* out = static_cast<char*>(v[1]);
    for (int k = 0; k < size; ++k) {
      const std::uint64_t n = out_off[k + 1] - out_off[k];
      if (k == rank) {
        TORCH_CHECK(n == in_off[k + 1] - in_off[k], "all_to_all_single: this rank's own split sizes disagree");
        if (n > 0) std::memcpy(out + out_off[k], static_cast<const char*>(v[0]) + in_off[k], n);
      } else {
        put(out + out_off[k], strip_sizes(got[k], size), n, k);
      }
    }
  };
  op->timing = all_to_all_timing(driver_device(input.device().index()), rank, sends);
  for (const auto b : sends) op->sent_bytes += b;
  op->own_transfers = own_transfers(rank, sends);
  return submit(op, c10d::OpType::ALLTOALL_BASE, Schedule{}, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "spyre process group: all_to_all expects ", size_, " inputs and outputs, found ", inputs.size(), " and ",
              outputs.size());
  auto op = std::make_shared<Op>();
  op->name = "all_to_all";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  for (const auto& i : inputs) check_tensor(i, "all_to_all input");
  for (const auto& o : outputs) {
    check_tensor(o, "all_to_all output");
    check_same(o, inputs[0], "all_to_all");
  }
  op->tensors = inputs;
  op->tensors.insert(op->tensors.end(), outputs.begin(), outputs.end());
  const int size = size_, rank = rank_;
  std::vector<std::uint64_t> in_bytes, out_bytes;
  for (const auto& i : inputs) in_bytes.push_back(nbytes(i));
  for (const auto& o : outputs) out_bytes.push_back(nbytes(o));
  std::vector<std::uint64_t> sends = in_bytes;
  sends[static_cast<std::size_t>(rank)] = 0;
  op->outgoing = [=](int peer, void* const* v) { return with_sizes(sends, bytes_of(v[peer], in_bytes[peer])); };
  op->finish = [=](void* const* v, std::vector<std::string>& got) {
    for (int k = 0; k < size; ++k) {
      if (k == rank) {
        TORCH_CHECK(out_bytes[k] == in_bytes[k], "all_to_all: this rank's own input and output sizes disagree");
        if (out_bytes[k] > 0) std::memcpy(v[size + k], v[k], out_bytes[k]);
      } else {
        put(v[size + k], strip_sizes(got[k], size), out_bytes[k], k);
      }
    }
  };
  op->timing = all_to_all_timing(driver_device(inputs[0].device().index()), rank, sends);
  for (const auto b : sends) op->sent_bytes += b;
  op->own_transfers = own_transfers(rank, sends);
  return submit(op, c10d::OpType::ALLTOALL, Schedule{}, outputs);
}

// Send and recv pair by (source, destination, tag, count): the n-th send from a to b
// with tag t meets the n-th recv at b from a with tag t. A send is eager: it sends and
// ends a transfer time after its own arrival, waiting for nobody, so a rank may send
// and then receive on one stream (a ring of isend/irecv); the recv ends a transfer time
// after the later of the two arrivals.
c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "spyre process group: send expects one tensor");
  TORCH_CHECK(dst_rank >= 0 && dst_rank < size_ && dst_rank != rank_, "spyre process group: send to rank ", dst_rank,
              ": expected another rank below ", size_);
  const at::Tensor t = tensors[0];
  check_tensor(t, "send");
  auto op = std::make_shared<Op>();
  op->name = "send";
  std::uint64_t& count = sent_[{dst_rank, tag}];
  op->key = fmt::format("p{}.{}>{}.{}", tag, rank_, dst_rank, count);
  op->send_to = {dst_rank};
  op->tensors = {t};
  const std::uint64_t n = nbytes(t);
  op->outgoing = [n](int, void* const* v) { return bytes_of(v[0], n); };
  Schedule s;
  s.steps.push_back({{static_cast<uint32_t>(rank_), static_cast<uint32_t>(dst_rank), n}});
  auto work = submit(op, c10d::OpType::SEND, s, {t}, /*writes_outputs=*/false);
  ++count;
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "spyre process group: recv expects one tensor");
  TORCH_CHECK(src_rank >= 0 && src_rank < size_ && src_rank != rank_, "spyre process group: recv from rank ",
              src_rank, ": expected another rank below ", size_);
  const at::Tensor t = tensors[0];
  check_tensor(t, "recv");
  auto op = std::make_shared<Op>();
  op->name = "recv";
  std::uint64_t& count = received_[{src_rank, tag}];
  op->key = fmt::format("p{}.{}>{}.{}", tag, src_rank, rank_, count);
  op->receive_from = {src_rank};
  op->tensors = {t};
  const std::uint64_t n = nbytes(t);
  op->finish = [=](void* const* v, std::vector<std::string>& got) { put(v[0], got[src_rank], n, src_rank); };
  Schedule s;
  s.steps.push_back({{static_cast<uint32_t>(src_rank), static_cast<uint32_t>(rank_), n}});
  auto work = submit(op, c10d::OpType::RECV, s, {t});
  ++count;
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSpyre::barrier(const c10d::BarrierOptions&) {
  auto op = std::make_shared<Op>();
  op->name = "barrier";
  op->send_to = op->receive_from = everyone_but(rank_, size_);
  // A ring all-reduce of nothing: 2(N - 1) latencies.
  return submit(op, c10d::OpType::BARRIER, ring(size_, 2 * (size_ - 1), 0), {});
}

}  // namespace spyre::distributed
