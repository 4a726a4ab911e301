// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011) shared by host and device
// code, so that CPU and CUDA draw the same uniforms for the same (seed, counter): sampling with a
// seed gives the same tokens on both backends.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSPARK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DSPARK_HOST_DEVICE inline
#endif

namespace dspark {

// Uniform lanes used at a sequence position (ops/speculative.h).
inline constexpr int kLaneSample = 0;    // the target's own sample: plain and coupled sampling
inline constexpr int kLaneAccept = 1;    // rejection sampling: the accept test of the draft
inline constexpr int kLaneResample = 2;  // rejection sampling: the residual / bonus draw
inline constexpr int kLaneDraft = 3;     // rejection sampling: a drafter's own sampling

struct Philox4 {
  uint32_t v[4];
};

DSPARK_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Philox-4x32 with 10 rounds: counter (c0..c3) and key (k0, k1) -> four 32-bit outputs.
DSPARK_HOST_DEVICE Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                      uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, c0, hi0, lo0);
    philox_mulhilo(kM1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n1 = lo1;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    const uint32_t n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// A uniform float in [0, 1) (24 random bits) for (seed, counter, lane); lane in [0, 4) picks one
// of the four outputs, so one counter gives up to four independent uniforms.
DSPARK_HOST_DEVICE float philox_uniform(uint64_t seed, uint64_t counter, int lane) {
  const Philox4 r =
      philox4x32(static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u,
                 static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.v[lane & 3] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace dspark
