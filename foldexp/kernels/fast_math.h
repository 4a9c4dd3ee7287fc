// Single-precision exp, sigmoid and tanh written so that GCC vectorizes them (selects instead of
// fmin/fmax calls): shared by fused_cells.cpp and the kernels that foldexp/kernels/pointwise_code.py
// generates for a user's own pointwise ops. Build with -fno-trapping-math, never -ffast-math.
//
// exp is Cephes' single-precision polynomial (about 1 ulp).

#pragma once
#include <cmath>
#include <cstdint>

namespace foldexp_math {

inline float exp_f(float x) {
  x = x < -88.3762626647949f ? -88.3762626647949f : x;
  x = x > 88.3762626647949f ? 88.3762626647949f : x;
  float k = std::floor(x * 1.44269504088896341f + 0.5f);
  x = x - k * 0.693359375f;
  x = x - k * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * (x * x) + x + 1.0f;
  return y * __builtin_bit_cast(float, ((int32_t)k + 127) << 23);
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

inline float tanh_f(float x) {
  float a = x < 0.0f ? -x : x;
  float z = x * x;  // Cephes' odd polynomial near 0, where 1 - 2 / (e^2a + 1) would cancel
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * x + x;
  float big = 1.0f - 2.0f / (exp_f(2.0f * a) + 1.0f);
  big = x < 0.0f ? -big : big;
  return a < 0.625f ? small : big;
}

}  // namespace foldexp_math
