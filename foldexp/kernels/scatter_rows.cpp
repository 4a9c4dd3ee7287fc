// Adding rows of gradients into a gradient buffer at given row numbers, from several sources
// whose rows may be strided (column slices of a wider tensor).
//
// Built and loaded with fused_cells.cpp (foldexp/kernels/native.py); the Python side is
// foldexp/kernels/scatter.py, which the executor's backward calls once per gather.
//
// Why: a gather reads the rows of several arguments at once (a Tree-LSTM cell's h_left, c_left,
// h_right, c_right), so their gradients come back as separate tensors, some of them column
// slices (the halves of cat([h_left, h_right], 1)'s gradient). torch's index_add_ is 4x slower
// on a strided source than on a contiguous one, and concatenating the pieces first costs a full
// copy (peers step: 2.2 ms). Here every source is read where it lies.
//
// Sums: each thread owns whole cache lines of columns and adds every row into them in index
// order, so each element is summed in the serial order, whatever the thread count.

#include <omp.h>

#include <cstdint>

namespace {

constexpr int64_t kLineFloats = 16;  // a 64-byte cache line
constexpr int64_t kParallelElements = 16384;

// Columns [c0, c1) of every source row added into its destination row, in index order.
void add_columns(int64_t n_src, int64_t rows, int64_t cols, int64_t c0, int64_t c1, float* dst,
                 const int64_t* idx, const float* const* srcs, const int64_t* strides) {
  for (int64_t s = 0; s < n_src; ++s) {
    const float* src = srcs[s];
    if (src == nullptr) continue;
    const int64_t* rows_of = idx + s * rows;
    for (int64_t r = 0; r < rows; ++r) {
      float* d = dst + rows_of[r] * cols;
      const float* x = src + r * strides[s];
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) d[c] += x[c];
    }
  }
}

}  // namespace

extern "C" {

// For every source s < n_src and row r < rows: dst[idx[s * rows + r]] += srcs[s] + r * strides[s]
// (cols floats each; dst rows are cols floats apart). A null source adds nothing. Returns 0, or
// -1 with nothing written when an index lies outside [0, dst_rows).
int scatter_add_rows(int64_t n_src, int64_t rows, int64_t cols, float* dst, int64_t dst_rows,
                     const int64_t* idx, const float* const* srcs, const int64_t* strides) {
  for (int64_t k = 0; k < n_src * rows; ++k) {
    if (idx[k] < 0 || idx[k] >= dst_rows) return -1;
  }
  const int64_t lines = (cols + kLineFloats - 1) / kLineFloats;
  // Small additions, or one thread: no parallel region (waking a team costs microseconds).
  if (n_src * rows * cols <= kParallelElements || lines < 2 || omp_get_max_threads() < 2) {
    add_columns(n_src, rows, cols, 0, cols, dst, idx, srcs, strides);
    return 0;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t c0 = lines * t / team * kLineFloats;
    const int64_t c1 = lines * (t + 1) / team * kLineFloats;
    add_columns(n_src, rows, cols, c0, c1 < cols ? c1 : cols, dst, idx, srcs, strides);
  }
  return 0;
}

}  // extern "C"
