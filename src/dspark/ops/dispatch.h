// Internal to ops/*.cpp: route a call to the CPU kernel or the CUDA launcher by the context's
// device. In a build without CUDA the CUDA branch reports "built without CUDA" (it cannot be
// reached in practice: a CUDA Context cannot be created in such a build).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/core/error.h"

#if DSPARK_WITH_CUDA
#define DSPARK_ON_CUDA(...) __VA_ARGS__
#else
#define DSPARK_ON_CUDA(...) DSPARK_FAIL(unsupported, "dspark was built without CUDA")
#endif
