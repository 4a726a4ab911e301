// Argument checks and device dispatch of index_topk and sparse_paged_attention (contract:
// ops/sparse_attention.h). On the CPU the page table and index tensors are host memory, so their
// values are checked too (offsets, lengths, page ids, selected ids); on CUDA only shapes and
// dtypes are.
#include "dspark/ops/sparse_attention.h"

#include <cmath>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

// A pool [n_pages, page_size, 1, >= width] of one float dtype with a contiguous last dim.
void check_pool(const char* op, const char* name, const Tensor& pages, int64_t width) {
  check_rank(op, name, pages, 4);
  check_float(op, name, pages);
  check_rows_contiguous(op, name, pages);
  DSPARK_CHECK(pages.size(1) > 0 && pages.size(2) == 1 && pages.size(3) >= width,
               "{}: {} must be [n_pages, page_size > 0, 1, >= {}], got {}", op, name, width,
               pages.describe());
}

// The shapes of the batch's rows and page table: q_indptr [n_rows + 1], page_indptr [n_rows + 1],
// page_indices, kv_lens [n_rows].
void check_table_shapes(const char* op, const PagedKv& kv, const Tensor& q_indptr) {
  check_vector(op, "q_indptr", q_indptr, DType::i32, -1);
  const int64_t n_rows = q_indptr.size(0) - 1;
  DSPARK_CHECK(n_rows >= 0, "{}: q_indptr must hold n_rows + 1 entries", op);
  check_vector(op, "page_indptr", kv.page_indptr, DType::i32, n_rows + 1);
  check_vector(op, "page_indices", kv.page_indices, DType::i32, -1);
  check_vector(op, "kv_lens", kv.kv_lens, DType::i32, n_rows);
}

// The values of the batch's rows and page table (host memory): q_indptr over n tokens,
// page_indptr / page_indices / kv_lens consistent with the pool.
void check_table_values(const char* op, const PagedKv& kv, const Tensor& q_indptr, int64_t n) {
  const int64_t n_rows = q_indptr.size(0) - 1;
  const int32_t* qi = q_indptr.data_as<int32_t>();
  const int32_t* pi = kv.page_indptr.data_as<int32_t>();
  const int32_t* pages = kv.page_indices.data_as<int32_t>();
  const int32_t* lens = kv.kv_lens.data_as<int32_t>();
  DSPARK_CHECK_KIND(invalid_input, qi[0] == 0 && qi[n_rows] == n,
                    "{}: q_indptr must run from 0 to {}", op, n);
  DSPARK_CHECK_KIND(invalid_input, pi[0] == 0 && pi[n_rows] <= kv.page_indices.size(0),
                    "{}: page_indptr must start at 0 and end within page_indices", op);
  const int64_t page_size = kv.k_pages.size(1), n_pages = kv.k_pages.size(0);
  for (int64_t r = 0; r < n_rows; ++r) {
    DSPARK_CHECK_KIND(invalid_input, qi[r] <= qi[r + 1] && pi[r] <= pi[r + 1],
                      "{}: q_indptr or page_indptr decreases at row {}", op, r);
    DSPARK_CHECK_KIND(invalid_input,
                      lens[r] >= 0 && lens[r] <= int64_t{pi[r + 1] - pi[r]} * page_size,
                      "{}: row {} has kv_len {} but {} pages of {}", op, r, lens[r],
                      pi[r + 1] - pi[r], page_size);
  }
  for (int64_t i = 0; i < pi[n_rows]; ++i)
    DSPARK_CHECK_KIND(invalid_input, pages[i] >= 0 && pages[i] < n_pages,
                      "{}: page_indices[{}] = {} is outside the pool's {} pages", op, i, pages[i],
                      n_pages);
}

void check_devices(const char* op, Context& ctx, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) check_on_device(op, "tensor", *t, ctx);
}

}  // namespace

void index_topk(Context& ctx, const Tensor& q, const Tensor& head_weights, const PagedKv& keys,
                const Tensor& q_indptr, const Tensor& q_pos, float scale, const Tensor& ids) {
  constexpr const char* kOp = "index_topk";
  check_rank(kOp, "q", q, 3);
  check_float(kOp, "q", q);
  check_rows_contiguous(kOp, "q", q);
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  check_float(kOp, "head_weights", head_weights);
  check_shape(kOp, "head_weights", head_weights, Shape{n, heads});
  check_rows_contiguous(kOp, "head_weights", head_weights);
  check_pool(kOp, "keys", keys.k_pages, d);
  DSPARK_CHECK(keys.k_pages.size(3) == d, "{}: keys are {} wide, q {}", kOp, keys.k_pages.size(3),
               d);
  check_rank(kOp, "ids", ids, 2);
  check_dtype(kOp, "ids", ids, DType::i32);
  DSPARK_CHECK(ids.size(0) == n && ids.size(1) >= 1 && ids.is_contiguous(),
               "{}: ids must be a contiguous i32 [{}, k >= 1], got {}", kOp, n, ids.describe());
  check_vector(kOp, "q_pos", q_pos, DType::i32, n);
  DSPARK_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", kOp, scale);
  check_devices(kOp, ctx,
                {&q, &head_weights, &keys.k_pages, &q_indptr, &q_pos, &ids, &keys.page_indptr,
                 &keys.page_indices, &keys.kv_lens});
  check_table_shapes(kOp, keys, q_indptr);
  if (ctx.is_cuda()) {
    if (n > 0)
      DSPARK_ON_CUDA(cuda::index_topk(ctx, q, head_weights, keys, q_indptr, q_pos, scale, ids));
    return;
  }
  check_table_values(kOp, keys, q_indptr, n);
  if (n == 0) return;
  cpu::index_topk(ctx, q, head_weights, keys, q_indptr, q_pos, scale, ids);
}

void sparse_paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv,
                            const Tensor& q_indptr, const Tensor& ids, float scale,
                            const Tensor& out) {
  constexpr const char* kOp = "sparse_paged_attention";
  check_rank(kOp, "q", q, 3);
  check_float(kOp, "q", q);
  check_rows_contiguous(kOp, "q", q);
  check_rank(kOp, "out", out, 3);
  check_float(kOp, "out", out);
  check_rows_contiguous(kOp, "out", out);
  const int64_t n = q.size(0);
  DSPARK_CHECK(out.size(0) == n && out.size(1) == q.size(1),
               "{}: out {} does not match q {} in tokens and heads", kOp, out.describe(),
               q.describe());
  check_pool(kOp, "k_pages", kv.k_pages, q.size(2));
  check_pool(kOp, "v_pages", kv.v_pages, out.size(2));
  DSPARK_CHECK(kv.k_pages.size(0) == kv.v_pages.size(0) && kv.k_pages.size(1) == kv.v_pages.size(1),
               "{}: k_pages {} and v_pages {} differ in pages", kOp, kv.k_pages.describe(),
               kv.v_pages.describe());
  check_rank(kOp, "ids", ids, 2);
  check_dtype(kOp, "ids", ids, DType::i32);
  DSPARK_CHECK(ids.size(0) == n && ids.is_contiguous(), "{}: ids must be a contiguous i32 [{}, k]",
               kOp, n);
  DSPARK_CHECK(std::isfinite(scale), "{}: scale must be finite, got {}", kOp, scale);
  check_devices(kOp, ctx,
                {&q, &out, &kv.k_pages, &kv.v_pages, &q_indptr, &ids, &kv.page_indptr,
                 &kv.page_indices, &kv.kv_lens});
  check_table_shapes(kOp, kv, q_indptr);
  if (ctx.is_cuda()) {
    if (n > 0) DSPARK_ON_CUDA(cuda::sparse_paged_attention(ctx, q, kv, q_indptr, ids, scale, out));
    return;
  }
  check_table_values(kOp, kv, q_indptr, n);
  const int32_t* qi = q_indptr.data_as<int32_t>();
  const int32_t* lens = kv.kv_lens.data_as<int32_t>();
  const int32_t* sel = ids.data_as<int32_t>();
  const int64_t k = ids.size(1);
  for (int64_t r = 0; r + 1 < q_indptr.size(0); ++r)
    for (int64_t t = qi[r]; t < qi[r + 1]; ++t)
      for (int64_t i = 0; i < k; ++i)
        DSPARK_CHECK_KIND(invalid_input, sel[t * k + i] < lens[r],
                          "{}: ids[{}, {}] = {} is beyond row {}'s {} keys", kOp, t, i,
                          sel[t * k + i], r, lens[r]);
  if (n == 0) return;
  cpu::sparse_paged_attention(ctx, q, kv, q_indptr, ids, scale, out);
}

}  // namespace dspark
