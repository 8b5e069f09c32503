// An MLP (linear, GELU, linear) on spyre:0 against the same on the CPU, through nothing
// but libtorch and the installed backend. Prints "ok <max error>" or fails.
#include <ATen/ATen.h>

#include <cstdio>

int main() {
  at::manual_seed(0);
  const at::Tensor x = at::randn({16, 64}), w1 = at::randn({128, 64}) * 0.1, b1 = at::randn({128}) * 0.1;
  const at::Tensor w2 = at::randn({32, 128}) * 0.1, b2 = at::randn({32}) * 0.1;
  const auto mlp = [](const at::Tensor& in, const at::Tensor& a, const at::Tensor& ab, const at::Tensor& b,
                      const at::Tensor& bb) { return at::linear(at::gelu(at::linear(in, a, ab)), b, bb); };
  const at::Device spyre("spyre:0");
  const at::Tensor got = mlp(x.to(spyre), w1.to(spyre), b1.to(spyre), w2.to(spyre), b2.to(spyre));
  if (got.device() != spyre) {
    std::printf("result on %s, not spyre:0\n", got.device().str().c_str());
    return 1;
  }
  const at::Tensor want = mlp(x, w1, b1, w2, b2);
  const double error = (got.cpu() - want).abs().max().item<double>();
  if (error > 1e-3) {
    std::printf("max error %g against the CPU\n", error);
    return 1;
  }
  std::printf("ok %g\n", error);
  return 0;
}
