// The backend from C++: device identity, copies, the caching allocator, the fallback.
#include <ATen/ATen.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "aten/cpu_fallback.h"
#include "aten/pointwise.h"
#include "runtime/caching_allocator.h"

using Catch::Matchers::ContainsSubstring;

namespace {
const c10::Device kSpyre("spyre:0");
}

TEST_CASE("given the backend library, spyre is a PyTorch device in C++") {
  CHECK(c10::Device("spyre:1").type() == c10::DeviceType::PrivateUse1);
  CHECK(c10::get_privateuse1_backend() == "spyre");
  const auto t = at::empty({2, 3}, at::TensorOptions().device(kSpyre));
  CHECK(t.device() == kSpyre);
  CHECK(t.is_privateuseone());
}

TEST_CASE("given tensors copied to spyre and back, values and strides survive") {
  const auto x = at::arange(24, at::kFloat).reshape({4, 6});
  const auto d = x.to(kSpyre);
  CHECK(at::equal(d.cpu(), x));
  CHECK(at::equal(d.t().contiguous().cpu(), x.t().contiguous()));
  CHECK(at::equal(x.t().to(kSpyre).cpu(), x.t()));
  CHECK(at::equal(x.to(at::kHalf).to(kSpyre).cpu(), x.to(at::kHalf)));
}

TEST_CASE("given allocations, the caching allocator keeps statistics and reuses blocks") {
  const auto before = spyre::backend::memory_stats(0);
  void* first = nullptr;
  {
    const auto t = at::empty({1 << 18}, at::TensorOptions().device(kSpyre));  // 1 MiB
    first = t.data_ptr();
    CHECK(spyre::backend::memory_stats(0).allocated_bytes.current == before.allocated_bytes.current + (1 << 20));
  }
  CHECK(spyre::backend::memory_stats(0).allocated_bytes.current == before.allocated_bytes.current);
  const auto again = at::empty({1 << 18}, at::TensorOptions().device(kSpyre));
  CHECK(again.data_ptr() == first);
  CHECK_THAT(spyre::backend::memory_summary(0), ContainsSubstring("reserved bytes"));
}

TEST_CASE("given an op without a spyre kernel, it runs on the CPU and is counted") {
  spyre::backend::reset_fallback_counts();
  const auto a = at::ones({3}, at::TensorOptions().device(kSpyre));
  const auto b = at::floor(a);
  CHECK(at::equal(b.cpu(), at::full({3}, 1.0f)));
  const auto counts = spyre::backend::fallback_counts();
  CHECK(!counts.empty());
  CHECK(std::any_of(counts.begin(), counts.end(), [](const auto& kv) { return kv.first.rfind("aten::floor", 0) == 0; }));
  // add has a device kernel now: it does not fall back.
  CHECK(at::equal(at::add(a, a).cpu(), at::full({3}, 2.0f)));
  CHECK(spyre::backend::fallback_counts().count("aten::add.Tensor") == 0);
}

TEST_CASE("given an allocation larger than the device, the error says what was asked and what is free") {
  try {
    (void)at::empty({std::int64_t{2} << 30}, at::TensorOptions().dtype(at::kByte).device(kSpyre));
    FAIL("expected an out-of-memory error");
  } catch (const c10::OutOfMemoryError& e) {
    CHECK_THAT(std::string(e.what()), ContainsSubstring("tried to allocate 2.00 GiB"));
  }
  CHECK(at::ones({4}, at::TensorOptions().device(kSpyre)).sum().item<float>() == 4.0f);
}

TEST_CASE("given a pointwise group, a kernel that depends on one it holds and other device work see them done") {
  const auto x = at::arange(3000, at::kFloat);
  const auto a = x.to(kSpyre);
  auto b = at::empty_like(a), c = at::empty_like(a), d = at::empty_like(a);
  {
    spyre::backend::PointwiseGroup group("test group");
    at::mul_out(b, a, 2);  // held
    at::add_out(c, b, 1);  // reads b: the group launches the multiply first, then holds this
    // A copy to the host is other device work: what the group holds is launched first.
    CHECK(at::equal(c.cpu(), x * 2 + 1));
    at::neg_out(d, a);  // held until the group closes
    group.close();
  }
  CHECK(at::equal(d.cpu(), -x));
  CHECK(at::equal(b.cpu(), x * 2));
}
