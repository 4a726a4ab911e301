// rope: CUDA vs CPU on [n, heads, head_dim] views of a fused QKV buffer, full and partial rotary,
// default and YaRN tables (attention scaling), positions up to 10^5.
#include "dspark/ops/rope.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct RopeCase {
  int head_dim;
  double partial;
  const char* type;
};
constexpr RopeCase kCases[] = {{16, 1.0, "default"}, {64, 1.0, "default"},   {64, 0.5, "default"},
                               {128, 1.0, "yarn"},   {256, 0.25, "default"}, {96, 1.0, "default"}};

TEST(CudaRope, MatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t n = 37, heads = 4, extra_heads = 3;  // q heads inside a [n, 7 * D] buffer
  std::vector<int32_t> positions = random_ints(n, 0, 32767, 1);
  positions[0] = 0;
  positions[1] = 100000;
  const Pair pos = vector_pair(positions, Shape{n});
  uint32_t seed = 10;
  for (const RopeCase c : kCases) {
    RopeScaling scaling;
    scaling.type = c.type;
    if (scaling.type == "yarn") {
      scaling.factor = 4.0;
      scaling.original_max_position_embeddings = 32768;
    }
    const RopeTable table = make_rope_table(c.head_dim, 1e6, c.partial, scaling, 131072);
    const Pair inv_freq =
        vector_pair(table.inv_freq, Shape{static_cast<int64_t>(table.inv_freq.size())});
    for (DType dtype : kFloatDTypes) {
      const int64_t d = c.head_dim, width = (heads + extra_heads) * d;
      const Pair buf = random_pair(dtype, Shape{n, width}, seed++);
      auto q_view = [&](const Tensor& t) {
        return Tensor(t.data(), t.dtype(), Shape{n, heads, d}, Shape{width, d, 1}, t.device());
      };
      rope(ctx.cpu, q_view(buf.cpu), pos.cpu, inv_freq.cpu, table.attention_scaling);
      rope(ctx.gpu, q_view(buf.gpu), pos.gpu, inv_freq.gpu, table.attention_scaling);
      ctx.gpu.synchronize();
      // The whole buffer: the K/V part must be untouched.
      expect_close(buf.gpu, buf.cpu, tolerance(dtype),
                   std::string(c.type) + " head_dim " + std::to_string(d) + " partial " +
                       std::to_string(c.partial) + " " + name_of(dtype));
    }
  }
}

}  // namespace
}  // namespace dspark::test
