// The bytes of collectives between the processes of a spyre process group: a TCP
// connection between every pair of ranks (found through PyTorch's store), messages
// keyed by a string, each carrying the sender's simulated arrival time. Between ranks
// on one machine (the same boot and mount namespace, so the same /dev/shm) a message's
// payload of 64 KiB or more travels through a POSIX shared-memory object instead, the
// connection carrying only its name. No torch here: the process group gives the store's
// set and get as functions.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace spyre::distributed {

struct Message {
  std::uint64_t arrival_ps = 0;  // the sender's simulated time when it reached the exchange
  std::string payload;
};

// Payloads this process has sent through shared memory (all transports; for tests).
std::uint64_t shared_memory_payloads();

class Transport {
 public:
  using Publish = std::function<void(const std::string& key, const std::string& value)>;
  using Lookup = std::function<std::string(const std::string& key)>;  // blocks until the key exists

  // Listens on `listen_address` (an ephemeral port), publishes "host:port" under
  // "spyre_c10d/<rank>", connects to every lower rank and accepts every higher one.
  // Throws std::runtime_error naming the peer and the reason on failure.
  Transport(int rank, int size, const std::string& listen_address, const Publish& publish, const Lookup& lookup,
            std::chrono::milliseconds timeout);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Whether payloads to `peer` may travel through shared memory.
  bool shares_memory_with(int peer) const { return peers_.at(peer)->same_machine; }

  // Sends a message to `peer` (thread-safe; returns when the bytes are written).
  void send(int peer, const std::string& key, std::uint64_t arrival_ps, const std::string& payload);
  // The message `key` from `peer`, waiting for it up to the timeout. Throws
  // std::runtime_error on timeout or when the peer's connection is gone.
  Message receive(int peer, const std::string& key);

 private:
  struct Peer {
    int fd = -1;
    bool same_machine = false;  // payloads may go through shared memory
    std::mutex send_mutex;
    std::thread reader;
    bool closed = false;  // guarded by mutex_
    std::string error;    // why it closed
  };

  void read_loop(int peer);

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  int listen_fd_ = -1;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::pair<int, std::string>, Message> mailbox_;
  bool stopping_ = false;
};

}  // namespace spyre::distributed
