// The spyre torch.distributed backend (c10d::Backend): collectives between processes
// that each drive one card, as the real stack runs them. Each collective is a command
// of the group's collective stream (spyreQueueExternal), queued behind what the current
// stream has so far: when the queue reaches it, the
// card's bytes go to the other ranks through the transport (distributed/transport.h),
// the results are written into the card's memory, and the command ends at the latest
// rank's arrival plus the collective's modelled time (spyreSystemScheduleTime over the
// configured system's links: ring all-reduce, all-gather and reduce-scatter, tree
// broadcast and reduce, direct gather, scatter, all-to-all and send/recv). Every rank
// computes the same end, so all see identical timestamps, run after run.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/schedules.h"
#include "spyre/spyre_drv.h"

namespace spyre::distributed {

class Transport;

class ProcessGroupSpyre final : public c10d::Backend {
 public:
  ProcessGroupSpyre(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupSpyre() override;

  // What torch.distributed.Backend.register_backend calls.
  static c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  const std::chrono::duration<float>& timeout);

  const std::string getBackendName() const override { return "spyre"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  struct Op;

 private:
  // Submits `op` to the group's collective stream of its tensors' device (or of the
  // current device), after what the current stream has queued so far, with the
  // modelled time of `schedule` on this group's cards and the bytes this card sends in
  // it, then records an event that the returned Work waits for.
  c10::intrusive_ptr<c10d::Work> submit(std::shared_ptr<Op> op, c10d::OpType type, const Schedule& schedule,
                                        std::vector<at::Tensor> outputs, bool writes_outputs = true);
  // The stream the group's collectives run on, one per device (as NCCL's): the current
  // stream's work after a collective overlaps it until something waits for it.
  c10::Stream collective_stream(c10::DeviceIndex device);
  // The event that orders a collective after the current stream's work, one per device
  // and re-recorded for each (a queue waits for the record as of its wait).
  spyre_event_t ready_event(c10::DeviceIndex device);

  std::shared_ptr<Transport> transport_;
  std::map<c10::DeviceIndex, c10::Stream> streams_;
  std::map<c10::DeviceIndex, spyre_event_t> ready_;
  std::uint64_t sequence_ = 0;
  std::map<std::pair<int, int>, std::uint64_t> sent_, received_;  // (peer, tag) -> sends / recvs so far
};

}  // namespace spyre::distributed
