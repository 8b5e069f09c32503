#include "distributed/transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace spyre::distributed {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(fmt::format("spyre process group: {}: {}", what, std::strerror(errno)));
}

void write_all(int fd, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("sending to a peer");
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// False at a clean end of stream before any byte.
bool read_all(int fd, void* data, std::size_t bytes) {
  auto* p = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::recv(fd, p + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && done == 0) return false;
    if (n <= 0) throw std::runtime_error("the connection closed in the middle of a message");
    done += static_cast<std::size_t>(n);
  }
  return true;
}

int connect_to(const std::string& address, std::chrono::milliseconds timeout) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("bad peer address '" + address + "'");
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      throw std::runtime_error(fmt::format("spyre process group: cannot resolve '{}': {}", host, gai_strerror(rc)));
    }
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(found);
        return fd;
      }
      ::close(fd);
    }
    ::freeaddrinfo(found);
    if (std::chrono::steady_clock::now() > deadline) fail("connecting to " + address);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

constexpr std::uint64_t kShmThreshold = 64 << 10;
std::atomic<std::uint64_t> g_shm_payloads{0};
std::atomic<std::uint64_t> g_shm_names{0};  // process-wide: names never repeat across transports

// What makes two ranks share /dev/shm: the same boot and the same mount namespace.
std::string machine_identity() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/mnt", ns, sizeof ns - 1);
  return boot + "/" + (n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : std::string("?"));
}

// The payload in a new shared-memory object named `name`; false (and nothing left
// behind) when /dev/shm cannot take it, and the payload goes over the connection.
// The space is allocated up front (posix_fallocate): writing into pages a full tmpfs
// cannot supply would kill the process with SIGBUS.
bool write_shm(const std::string& name, const std::string& payload) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return false;
  if (::posix_fallocate(fd, 0, static_cast<off_t>(payload.size())) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return false;
  }
  void* p = ::mmap(nullptr, payload.size(), PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return false;
  }
  std::memcpy(p, payload.data(), payload.size());
  ::munmap(p, payload.size());
  return true;
}

// Reads and removes a shared-memory payload of `bytes`.
std::string read_shm(const std::string& name, std::uint64_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) fail("shm_open " + name + " (a peer's payload)");
  ::shm_unlink(name.c_str());
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) fail("mmap " + name);
  std::string out(static_cast<const char*>(p), bytes);
  ::munmap(p, bytes);
  return out;
}

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

std::uint64_t shared_memory_payloads() { return g_shm_payloads.load(); }

Transport::Transport(int rank, int size, const std::string& listen_address, const Publish& publish,
                     const Lookup& lookup, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument(fmt::format("spyre process group: rank {} of {} is out of range", rank, size));
  }
  for (int i = 0; i < size; ++i) peers_.push_back(std::make_unique<Peer>());
  if (size == 1) return;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd_ < 0) fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, listen_address == "*" ? "0.0.0.0" : listen_address.c_str(), &addr.sin_addr) != 1) {
    throw std::runtime_error("spyre process group: SPYRE_C10D_ADDR: expected an IPv4 address, found '" +
                             listen_address + "'");
  }
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("bind " + listen_address);
  if (::listen(listen_fd_, size) != 0) fail("listen");
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string me = machine_identity();
  publish(fmt::format("spyre_c10d/{}", rank), fmt::format("{}:{}", listen_address, ntohs(addr.sin_port)));
  publish(fmt::format("spyre_c10d/{}/machine", rank), me);
  // Lower ranks are connected to, higher ones accepted; each connection starts with the
  // connecting rank.
  for (int peer = 0; peer < rank; ++peer) {
    const int fd = connect_to(lookup(fmt::format("spyre_c10d/{}", peer)), timeout);
    tune(fd);
    const std::int32_t self = rank;
    write_all(fd, &self, sizeof self);
    peers_[peer]->fd = fd;
  }
  for (int accepted = rank + 1; accepted < size; ++accepted) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (ready <= 0) {
      throw std::runtime_error(fmt::format("spyre process group: rank {} waited {} ms for the higher ranks to connect",
                                           rank, timeout.count()));
    }
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) fail("accept");
    tune(fd);
    std::int32_t who = -1;
    if (!read_all(fd, &who, sizeof who) || who <= rank || who >= size || peers_[who]->fd >= 0) {
      ::close(fd);
      throw std::runtime_error(fmt::format("spyre process group: rank {} accepted a connection from an unexpected rank {}",
                                           rank, who));
    }
    peers_[who]->fd = fd;
  }
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    peers_[peer]->same_machine = std::getenv("SPYRE_C10D_NO_SHM") == nullptr &&
                                 lookup(fmt::format("spyre_c10d/{}/machine", peer)) == me;
  }
  // Nothing after this throws: a reader thread must not outlive a failed constructor.
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) peers_[peer]->reader = std::thread([this, peer] { read_loop(peer); });
  }
}

Transport::~Transport() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  for (auto& p : peers_) {
    if (p->fd >= 0) ::shutdown(p->fd, SHUT_RDWR);
  }
  for (auto& p : peers_) {
    if (p->reader.joinable()) p->reader.join();
    if (p->fd >= 0) ::close(p->fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

// Frame: u32 key length, key, u64 arrival, u64 payload length, u8 where (0: the
// payload follows; 1: a shared-memory object of that length holds it, its name
// follows as u32 length and bytes).
void Transport::send(int peer, const std::string& key, std::uint64_t arrival_ps, const std::string& payload) {
  Peer& p = *peers_.at(peer);
  const std::uint32_t key_len = static_cast<std::uint32_t>(key.size());
  const std::uint64_t payload_len = payload.size();
  std::string name;
  if (p.same_machine && payload_len >= kShmThreshold) {
    name = fmt::format("/spyre-c10d-{}-{}", ::getpid(), g_shm_names++);
    if (write_shm(name, payload)) {
      ++g_shm_payloads;
    } else {
      name.clear();  // /dev/shm is full or missing: over the connection
    }
  }
  const std::uint8_t shared = name.empty() ? 0 : 1;
  std::string header;
  header.append(reinterpret_cast<const char*>(&key_len), sizeof key_len);
  header += key;
  header.append(reinterpret_cast<const char*>(&arrival_ps), sizeof arrival_ps);
  header.append(reinterpret_cast<const char*>(&payload_len), sizeof payload_len);
  header.append(reinterpret_cast<const char*>(&shared), sizeof shared);
  if (shared) {
    const std::uint32_t name_len = static_cast<std::uint32_t>(name.size());
    header.append(reinterpret_cast<const char*>(&name_len), sizeof name_len);
    header += name;
  }
  const std::lock_guard lock(p.send_mutex);
  try {
    write_all(p.fd, header.data(), header.size());
    if (!shared && !payload.empty()) write_all(p.fd, payload.data(), payload.size());
  } catch (...) {
    if (shared) ::shm_unlink(name.c_str());  // nobody will read it
    throw;
  }
}

void Transport::read_loop(int peer) {
  Peer& p = *peers_[peer];
  std::string error = "rank " + std::to_string(peer) + " closed its connection";
  try {
    for (;;) {
      std::uint32_t key_len = 0;
      if (!read_all(p.fd, &key_len, sizeof key_len)) break;
      std::string key(key_len, '\0');
      Message m;
      std::uint64_t payload_len = 0;
      read_all(p.fd, key.data(), key_len);
      read_all(p.fd, &m.arrival_ps, sizeof m.arrival_ps);
      read_all(p.fd, &payload_len, sizeof payload_len);
      std::uint8_t shared = 0;
      read_all(p.fd, &shared, sizeof shared);
      if (shared) {
        std::uint32_t name_len = 0;
        read_all(p.fd, &name_len, sizeof name_len);
        std::string name(name_len, '\0');
        read_all(p.fd, name.data(), name_len);
        m.payload = read_shm(name, payload_len);
      } else {
        m.payload.resize(payload_len);
        if (payload_len > 0) read_all(p.fd, m.payload.data(), payload_len);
      }
      const std::lock_guard lock(mutex_);
      mailbox_[{peer, std::move(key)}] = std::move(m);
      arrived_.notify_all();
    }
  } catch (const std::exception& e) {
    error = fmt::format("the connection to rank {} failed: {}", peer, e.what());
  }
  const std::lock_guard lock(mutex_);
  p.closed = true;
  p.error = error;
  arrived_.notify_all();
}

Message Transport::receive(int peer, const std::string& key) {
  std::unique_lock lock(mutex_);
  const auto id = std::make_pair(peer, key);
  const bool got = arrived_.wait_for(lock, timeout_, [&] { return mailbox_.count(id) > 0 || peers_[peer]->closed; });
  if (auto it = mailbox_.find(id); it != mailbox_.end()) {
    Message m = std::move(it->second);
    mailbox_.erase(it);
    return m;
  }
  if (!got) {
    throw std::runtime_error(fmt::format("rank {} waited {} ms for '{}' from rank {} (do all ranks call the same "
                                         "collectives in the same order?)",
                                         rank_, timeout_.count(), key, peer));
  }
  throw std::runtime_error(peers_[peer]->error);
}

}  // namespace spyre::distributed
