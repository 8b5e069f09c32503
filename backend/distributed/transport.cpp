#include "distributed/transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
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

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

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
  publish(fmt::format("spyre_c10d/{}", rank), fmt::format("{}:{}", listen_address, ntohs(addr.sin_port)));
  // Lower ranks are connected to, higher ones accepted; each connection starts with the
  // connecting rank.
  for (int peer = 0; peer < rank; ++peer) {
    const int fd = connect_to(lookup(fmt::format("spyre_c10d/{}", peer)), timeout);
    tune(fd);
    const std::int32_t me = rank;
    write_all(fd, &me, sizeof me);
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

// Frame: u32 key length, key, u64 arrival, u64 payload length, payload.
void Transport::send(int peer, const std::string& key, std::uint64_t arrival_ps, const std::string& payload) {
  Peer& p = *peers_.at(peer);
  const std::lock_guard lock(p.send_mutex);
  const std::uint32_t key_len = static_cast<std::uint32_t>(key.size());
  const std::uint64_t payload_len = payload.size();
  std::string header;
  header.append(reinterpret_cast<const char*>(&key_len), sizeof key_len);
  header += key;
  header.append(reinterpret_cast<const char*>(&arrival_ps), sizeof arrival_ps);
  header.append(reinterpret_cast<const char*>(&payload_len), sizeof payload_len);
  write_all(p.fd, header.data(), header.size());
  if (!payload.empty()) write_all(p.fd, payload.data(), payload.size());
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
      m.payload.resize(payload_len);
      if (payload_len > 0) read_all(p.fd, m.payload.data(), payload_len);
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
