// Internal to ops/*.cpp: route a call to the CPU kernel or the CUDA launcher by the context's
// device. In a build without CUDA the CUDA branch reports "built without CUDA" (it cannot be
// reached in practice: a CUDA Context cannot be created in such a build).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_profile.h"
#include "dspark/core/error.h"

// Every CUDA launch is bracketed for the op profiler (backend/op_profile.h; a no-op unless
// enabled). Needs a `ctx` (the op's Context) in scope.
#if DSPARK_WITH_CUDA
#define DSPARK_ON_CUDA(...)                                             \
  do {                                                                  \
    const ::dspark::OpProfileScope dspark_op_scope_(ctx, #__VA_ARGS__); \
    __VA_ARGS__;                                                        \
  } while (0)
#else
#define DSPARK_ON_CUDA(...) DSPARK_FAIL(unsupported, "dspark was built without CUDA")
#endif
