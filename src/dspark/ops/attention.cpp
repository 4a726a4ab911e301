// Argument checks and device dispatch of kv_write and paged_attention (contract:
// ops/attention.h). On the CPU the page table and index tensors are host memory, so their values
// are checked too (offsets, lengths, page ids); on CUDA only shapes and dtypes are.
#include "dspark/ops/attention.h"

#include <cmath>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

// k_pages / v_pages: [n_pages, page_size, n_kv_heads, head_dim], contiguous, one float dtype.
void check_pages(const char* op, Context& ctx, const Tensor& k_pages, const Tensor& v_pages) {
  check_rank(op, "k_pages", k_pages, 4);
  check_float(op, "k_pages", k_pages);
  check_contiguous(op, "k_pages", k_pages);
  check_dtype(op, "v_pages", v_pages, k_pages.dtype());
  check_shape(op, "v_pages", v_pages, k_pages.shape());
  check_contiguous(op, "v_pages", v_pages);
  DSPARK_CHECK(k_pages.size(1) > 0, "{}: page_size must be > 0", op);
  check_on_device(op, "k_pages", k_pages, ctx);
  check_on_device(op, "v_pages", v_pages, ctx);
}

// An i32 offsets vector [n + 1]: starts at 0, non-decreasing, ends at `total` (host values).
void check_indptr_values(const char* op, const char* name, const Tensor& indptr, int64_t total) {
  const int32_t* p = indptr.data_as<int32_t>();
  const int64_t n = indptr.size(0) - 1;
  DSPARK_CHECK_KIND(invalid_input, p[0] == 0, "{}: {}[0] must be 0, got {}", op, name, p[0]);
  for (int64_t r = 0; r < n; ++r)
    DSPARK_CHECK_KIND(invalid_input, p[r] <= p[r + 1], "{}: {} decreases at {}", op, name, r);
  if (total >= 0)
    DSPARK_CHECK_KIND(invalid_input, p[n] == total, "{}: {}[{}] = {}, expected {}", op, name, n,
                      p[n], total);
}

}  // namespace

void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots,
              const Tensor& k_pages, const Tensor& v_pages) {
  constexpr const char* kOp = "kv_write";
  check_pages(kOp, ctx, k_pages, v_pages);
  check_rank(kOp, "k", k, 3);
  check_float(kOp, "k", k);
  check_float(kOp, "v", v);
  check_rows_contiguous(kOp, "k", k);
  check_rows_contiguous(kOp, "v", v);
  const int64_t n = k.size(0);
  check_shape(kOp, "k", k, Shape{n, k_pages.size(2), k_pages.size(3)});
  check_shape(kOp, "v", v, k.shape());
  check_vector(kOp, "slots", slots, DType::i32, n);
  check_on_device(kOp, "k", k, ctx);
  check_on_device(kOp, "v", v, ctx);
  check_on_device(kOp, "slots", slots, ctx);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::kv_write(ctx, k, v, slots, k_pages, v_pages));
  } else {
    const int32_t* s = slots.data_as<int32_t>();
    const int64_t n_slots = k_pages.size(0) * k_pages.size(1);
    for (int64_t i = 0; i < n; ++i)
      DSPARK_CHECK_KIND(invalid_input, s[i] >= 0 && s[i] < n_slots,
                        "{}: slots[{}] = {} is outside the cache's {} slots", kOp, i, s[i],
                        n_slots);
    cpu::kv_write(ctx, k, v, slots, k_pages, v_pages);
  }
}

void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out) {
  constexpr const char* kOp = "paged_attention";
  check_pages(kOp, ctx, kv.k_pages, kv.v_pages);
  check_rank(kOp, "q", q, 3);
  check_float(kOp, "q", q);
  check_rows_contiguous(kOp, "q", q);
  check_float(kOp, "out", out);
  check_shape(kOp, "out", out, q.shape());
  check_rows_contiguous(kOp, "out", out);
  const int64_t n_tokens = q.size(0), n_heads = q.size(1), head_dim = q.size(2);
  const int64_t n_kv_heads = kv.k_pages.size(2);
  DSPARK_CHECK(kv.k_pages.size(3) == head_dim, "{}: q head_dim {} but the cache has {}", kOp,
               head_dim, kv.k_pages.size(3));
  DSPARK_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0,
               "{}: n_heads {} is not a multiple of n_kv_heads {}", kOp, n_heads, n_kv_heads);
  check_vector(kOp, "q_indptr", q_indptr, DType::i32, -1);
  const int64_t n_rows = q_indptr.size(0) - 1;
  DSPARK_CHECK(n_rows >= 0, "{}: q_indptr must hold n_rows + 1 entries", kOp);
  check_vector(kOp, "q_pos", q_pos, DType::i32, n_tokens);
  check_vector(kOp, "page_indptr", kv.page_indptr, DType::i32, n_rows + 1);
  check_vector(kOp, "page_indices", kv.page_indices, DType::i32, -1);
  check_vector(kOp, "kv_lens", kv.kv_lens, DType::i32, n_rows);
  for (const auto& [name, t] : {std::pair{"q", &q},
                                {"out", &out},
                                {"q_indptr", &q_indptr},
                                {"q_pos", &q_pos},
                                {"page_indptr", &kv.page_indptr},
                                {"page_indices", &kv.page_indices},
                                {"kv_lens", &kv.kv_lens}})
    check_on_device(kOp, name, *t, ctx);
  DSPARK_CHECK(std::isfinite(params.scale), "{}: scale must be finite, got {}", kOp, params.scale);
  DSPARK_CHECK(params.sliding_window >= 0, "{}: sliding_window must be >= 0, got {}", kOp,
               params.sliding_window);
  DSPARK_CHECK(params.softcap >= 0.0f && std::isfinite(params.softcap),
               "{}: softcap must be a finite number >= 0, got {}", kOp, params.softcap);
  if (n_tokens == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::paged_attention(ctx, q, kv, q_indptr, q_pos, params, out));
    return;
  }
  check_indptr_values(kOp, "q_indptr", q_indptr, n_tokens);
  check_indptr_values(kOp, "page_indptr", kv.page_indptr, -1);
  const int32_t* page_indptr = kv.page_indptr.data_as<int32_t>();
  const int32_t* pages = kv.page_indices.data_as<int32_t>();
  const int32_t* kv_lens = kv.kv_lens.data_as<int32_t>();
  const int64_t n_pages = kv.k_pages.size(0), page_size = kv.k_pages.size(1);
  DSPARK_CHECK_KIND(invalid_input, page_indptr[n_rows] <= kv.page_indices.size(0),
                    "{}: page_indptr ends at {} but page_indices has {} entries", kOp,
                    page_indptr[n_rows], kv.page_indices.size(0));
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t row_pages = page_indptr[r + 1] - page_indptr[r];
    DSPARK_CHECK_KIND(invalid_input, kv_lens[r] >= 0 && kv_lens[r] <= row_pages * page_size,
                      "{}: row {} has kv_len {} but {} pages of {}", kOp, r, kv_lens[r], row_pages,
                      page_size);
  }
  for (int64_t i = 0; i < page_indptr[n_rows]; ++i)
    DSPARK_CHECK_KIND(invalid_input, pages[i] >= 0 && pages[i] < n_pages,
                      "{}: page_indices[{}] = {} is outside the pool's {} pages", kOp, i, pages[i],
                      n_pages);
  cpu::paged_attention(ctx, q, kv, q_indptr, q_pos, params, out);
}

}  // namespace dspark
