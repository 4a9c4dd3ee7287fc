// Tree-LSTM state updates in one pass over their rows, forward and backward; and flush-to-zero
// for torch's OpenMP threads (foldexp/kernels/denormals.py).
//
// Built and loaded by foldexp/kernels/native.py (g++ -O3 -march=native -fopenmp, through ctypes);
// the Python side is foldexp/kernels/treelstm.py. Plain C ABI: float32, contiguous rows.
//
// Why: torch runs a binary Tree-LSTM's state update (four sigmoids, two tanh, five products, two
// sums) as about 15 kernels forward and 20 backward, each a pass over memory and, at SST's small
// groups, a few microseconds of dispatch. Here each direction is one loop the compiler vectorizes.
//
// Layouts (H = hidden size, one row per node):
//   binary: z (n, 5H) pre-activations i, f_left, f_right, o, u; cl, cr (n, H) children's memories
//   leaf:   z (n, 3H) pre-activations i, o, u; carry (n, H) added to c, or null:
//           c = i * u + carry, a child-sum node's sum of its children's gated memories
//   mask:   (n, H) dropout multipliers on tanh(u) (0 or 1/(1-p)), or null
//   dh, dc: (n, H) output gradients, or null where autograd has none
// The backward recomputes the activations from z: saving them (6H floats a row) and reading them
// back cost more than the arithmetic (5,476 x 128, 2 threads: 4.1 against 2.6 ms a step).
//
// exp, sigmoid and tanh: fast_math.h.

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fast_math.h"
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace {

using namespace foldexp_math;

// Rows split among torch's OpenMP threads once there is enough work to pay for waking them.
constexpr int64_t kParallelElements = 16384;

template <bool kMask>
void binary_forward_rows(int64_t n, int64_t H, const float* z, const float* cl, const float* cr,
                         const float* mask, float* h, float* c) {
#pragma omp parallel for schedule(static) if (n * H > kParallelElements)
  for (int64_t r = 0; r < n; ++r) {
    const float* zr = z + r * 5 * H;
    const float *zi = zr, *zl = zr + H, *zrr = zr + 2 * H, *zo = zr + 3 * H, *zu = zr + 4 * H;
    const int64_t b = r * H;
    const float *clb = cl + b, *crb = cr + b, *mb = mask + b;
    float *hb = h + b, *cb = c + b;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      float i = sigmoid_f(zi[j]), fl = sigmoid_f(zl[j]), fr = sigmoid_f(zrr[j]);
      float o = sigmoid_f(zo[j]), t = tanh_f(zu[j]);
      float u = kMask ? t * mb[j] : t;
      float cc = i * u + fl * clb[j] + fr * crb[j];
      cb[j] = cc;
      hb[j] = o * tanh_f(cc);
    }
  }
}

template <bool kMask, bool kDh, bool kDc>
void binary_backward_rows(int64_t n, int64_t H, const float* z, const float* cl,
                          const float* cr, const float* mask, const float* dh, const float* dc,
                          float* dz, float* dcl, float* dcr) {
#pragma omp parallel for schedule(static) if (n * H > kParallelElements)
  for (int64_t r = 0; r < n; ++r) {
    const float* zr = z + r * 5 * H;
    const float *zi = zr, *zl = zr + H, *zrr = zr + 2 * H, *zo = zr + 3 * H, *zu = zr + 4 * H;
    float* dzr = dz + r * 5 * H;
    float *di = dzr, *dl = dzr + H, *drr = dzr + 2 * H, *dout = dzr + 3 * H, *du = dzr + 4 * H;
    const int64_t b = r * H;
    const float *clb = cl + b, *crb = cr + b, *mb = mask + b, *dhb = dh + b, *dcb = dc + b;
    float *dclb = dcl + b, *dcrb = dcr + b;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      float i = sigmoid_f(zi[j]), fl = sigmoid_f(zl[j]), fr = sigmoid_f(zrr[j]);
      float o = sigmoid_f(zo[j]), t = tanh_f(zu[j]);
      float m = kMask ? mb[j] : 1.0f;
      float tc = tanh_f(i * (t * m) + fl * clb[j] + fr * crb[j]);
      float gh = kDh ? dhb[j] : 0.0f;
      float g = (kDc ? dcb[j] : 0.0f) + gh * o * (1.0f - tc * tc);  // d loss / d c
      di[j] = g * (t * m) * i * (1.0f - i);
      dl[j] = g * clb[j] * fl * (1.0f - fl);
      drr[j] = g * crb[j] * fr * (1.0f - fr);
      dout[j] = gh * tc * o * (1.0f - o);
      du[j] = g * i * m * (1.0f - t * t);
      dclb[j] = g * fl;
      dcrb[j] = g * fr;
    }
  }
}

template <bool kMask, bool kCarry>
void leaf_forward_rows(int64_t n, int64_t H, const float* z, const float* mask, const float* carry,
                       float* h, float* c) {
#pragma omp parallel for schedule(static) if (n * H > kParallelElements)
  for (int64_t r = 0; r < n; ++r) {
    const float* zr = z + r * 3 * H;
    const float *zi = zr, *zo = zr + H, *zu = zr + 2 * H;
    const int64_t b = r * H;
    const float *mb = mask + b, *kb = carry + b;
    float *hb = h + b, *cb = c + b;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      float i = sigmoid_f(zi[j]), o = sigmoid_f(zo[j]), t = tanh_f(zu[j]);
      float cc = i * (kMask ? t * mb[j] : t);
      if (kCarry) cc += kb[j];
      cb[j] = cc;
      hb[j] = o * tanh_f(cc);
    }
  }
}

template <bool kMask, bool kCarry, bool kDh, bool kDc>
void leaf_backward_rows(int64_t n, int64_t H, const float* z, const float* mask,
                        const float* carry, const float* dh, const float* dc, float* dz,
                        float* dcarry) {
#pragma omp parallel for schedule(static) if (n * H > kParallelElements)
  for (int64_t r = 0; r < n; ++r) {
    const float* zr = z + r * 3 * H;
    const float *zi = zr, *zo = zr + H, *zu = zr + 2 * H;
    float* dzr = dz + r * 3 * H;
    float *di = dzr, *dout = dzr + H, *du = dzr + 2 * H;
    const int64_t b = r * H;
    const float *mb = mask + b, *kb = carry + b, *dhb = dh + b, *dcb = dc + b;
    float* dkb = dcarry + b;
#pragma omp simd
    for (int64_t j = 0; j < H; ++j) {
      float i = sigmoid_f(zi[j]), o = sigmoid_f(zo[j]), t = tanh_f(zu[j]);
      float m = kMask ? mb[j] : 1.0f;
      float tc = tanh_f(i * (t * m) + (kCarry ? kb[j] : 0.0f));
      float gh = kDh ? dhb[j] : 0.0f;
      float g = (kDc ? dcb[j] : 0.0f) + gh * o * (1.0f - tc * tc);
      di[j] = g * (t * m) * i * (1.0f - i);
      dout[j] = gh * tc * o * (1.0f - o);
      du[j] = g * i * m * (1.0f - t * t);
      if (kCarry) dkb[j] = g;
    }
  }
}

// Calls ``f`` with std::true_type or std::false_type: each entry point below picks the loop
// compiled for its null pointers, so no branch stays inside a vectorized loop.
template <typename F>
void with_flag(bool flag, F&& f) {
  if (flag) f(std::true_type{}); else f(std::false_type{});
}

}  // namespace

extern "C" {

int foldexp_kernels_abi() { return 6; }  // native.py's ABI

// Flush-to-zero and denormals-are-zero (MXCSR bits 15 and 6) on every thread of the OpenMP team
// torch computes on: torch.set_flush_denormal reaches only its calling thread. Returns how many
// threads took it (0 where the CPU has no such bits).
int foldexp_set_flush_denormal(int on) {
  int threads = 0;
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel reduction(+ : threads)
  {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(on ? (csr | 0x8040u) : (csr & ~0x8040u));
    threads += 1;
  }
#else
  (void)on;
#endif
  return threads;
}

void binary_forward(int64_t n, int64_t H, const float* z, const float* cl, const float* cr,
                    const float* mask, float* h, float* c) {
  with_flag(mask, [&](auto m) {
    binary_forward_rows<decltype(m)::value>(n, H, z, cl, cr, mask, h, c);
  });
}

void binary_backward(int64_t n, int64_t H, const float* z, const float* cl, const float* cr,
                     const float* mask, const float* dh, const float* dc, float* dz, float* dcl,
                     float* dcr) {
  with_flag(mask, [&](auto m) { with_flag(dh, [&](auto gh) { with_flag(dc, [&](auto gc) {
    binary_backward_rows<decltype(m)::value, decltype(gh)::value, decltype(gc)::value>(
        n, H, z, cl, cr, mask, dh, dc, dz, dcl, dcr);
  }); }); });
}

void leaf_forward(int64_t n, int64_t H, const float* z, const float* mask, const float* carry,
                  float* h, float* c) {
  with_flag(mask, [&](auto m) { with_flag(carry, [&](auto k) {
    leaf_forward_rows<decltype(m)::value, decltype(k)::value>(n, H, z, mask, carry, h, c);
  }); });
}

void leaf_backward(int64_t n, int64_t H, const float* z, const float* mask, const float* carry,
                   const float* dh, const float* dc, float* dz, float* dcarry) {
  with_flag(mask, [&](auto m) { with_flag(carry, [&](auto k) {
    with_flag(dh, [&](auto gh) { with_flag(dc, [&](auto gc) {
      leaf_backward_rows<decltype(m)::value, decltype(k)::value, decltype(gh)::value,
                         decltype(gc)::value>(n, H, z, mask, carry, dh, dc, dz, dcarry);
    }); });
  }); });
}

}  // extern "C"
