#include "runtime/derived.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <c10/core/StorageImpl.h>

namespace spyre::backend::derived {
namespace {

struct Copy {
  std::string kind;
  c10::Stream stream;
  at::Tensor tensor;
};

// The copies derived from one storage, by the storage's first byte.
struct Source {
  std::uintptr_t end = 0;                              // one past the storage's last byte
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // (a weak reference keeps the object: no reuse of its address)
  std::vector<Copy> copies;
};

std::mutex g_mutex;
// (Never destroyed: its tensors would be freed after the driver shut down at exit.)
std::map<std::uintptr_t, Source>& g_sources = *new std::map<std::uintptr_t, Source>;
std::atomic<std::size_t> g_count{0};  // copies kept: note_write skips the lock when none are

std::uintptr_t first_byte(const at::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.storage().data()); }

// Erases `it`, moving its copies into `doomed` (freed once the lock is released: a
// tensor's release re-enters the allocator).
void drop(std::map<std::uintptr_t, Source>::iterator it, std::vector<Copy>& doomed) {
  g_count -= it->second.copies.size();
  for (auto& c : it->second.copies) doomed.push_back(std::move(c));
  g_sources.erase(it);
}

}  // namespace

std::optional<at::Tensor> find(const at::Tensor& source, const std::string& kind, c10::Stream stream) {
  if (g_count.load(std::memory_order_relaxed) == 0 || !source.has_storage()) return std::nullopt;
  const std::lock_guard lock(g_mutex);
  const auto it = g_sources.find(first_byte(source));
  if (it == g_sources.end()) return std::nullopt;
  // Another storage at the same address (the first freed, its copies not yet dropped).
  if (it->second.storage.lock().get() != source.storage().unsafeGetStorageImpl()) return std::nullopt;
  for (const Copy& c : it->second.copies) {
    if (c.kind == kind && c.stream == stream) return c.tensor;
  }
  return std::nullopt;
}

void keep(const at::Tensor& source, const std::string& kind, c10::Stream stream, at::Tensor copy) {
  if (!source.has_storage()) return;
  std::vector<Copy> doomed;
  const std::lock_guard lock(g_mutex);
  // Sources whose storage is gone: their copies only hold memory.
  for (auto it = g_sources.begin(); it != g_sources.end();) {
    auto next = std::next(it);
    if (it->second.storage.expired()) drop(it, doomed);
    it = next;
  }
  const std::uintptr_t first = first_byte(source);
  auto it = g_sources.find(first);
  if (it != g_sources.end() && it->second.storage.lock().get() != source.storage().unsafeGetStorageImpl()) {
    drop(it, doomed);
    it = g_sources.end();
  }
  if (it == g_sources.end()) {
    it = g_sources
             .emplace(first, Source{.end = first + source.storage().nbytes(),
                                    .storage = c10::weak_intrusive_ptr<c10::StorageImpl>(
                                        source.storage().getWeakStorageImpl()),
                                    .copies = {}})
             .first;
  }
  for (Copy& c : it->second.copies) {
    if (c.kind == kind && c.stream == stream) {
      doomed.push_back(std::exchange(c, Copy{kind, stream, std::move(copy)}));
      return;
    }
  }
  it->second.copies.push_back(Copy{kind, stream, std::move(copy)});
  ++g_count;
}

void note_write(const void* address) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  std::vector<Copy> doomed;
  const std::lock_guard lock(g_mutex);
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  auto it = g_sources.upper_bound(a);
  if (it == g_sources.begin()) return;
  --it;
  if (a < it->second.end || a == it->first) drop(it, doomed);
}

bool clear() {
  std::map<std::uintptr_t, Source> all;
  {
    const std::lock_guard lock(g_mutex);
    all.swap(g_sources);
    g_count = 0;
  }
  return !all.empty();
}

}  // namespace spyre::backend::derived
