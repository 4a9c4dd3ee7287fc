// Dropout noise drawn from torch's CPU generator, bit for bit as torch.dropout draws it.
//
// Built with fused_cells.cpp into one library by foldexp/kernels/native.py; the Python side is
// foldexp/kernels/dropout_noise.py, which checks at first use that this file reproduces the torch it
// runs with (values and the generator's state after the draw) and uses torch's dropout if not.
//
// Why: on CPU, torch.dropout(x, p, train=True) is noise = empty_like(x).bernoulli_(1 - p);
// noise.div_(1 - p); x * noise. torch's bernoulli_ draws element by element from its Mersenne
// Twister (MT19937), turning two 32-bit outputs into a 53-bit double uniform u and keeping the
// element when u < keep: about 9 ns an element, 10% of an SST Tree-LSTM training step. Here the
// twister's state is advanced a block of 624 words at a time and the uniforms are compared as
// integers, in loops the compiler vectorizes: the same numbers, in the same order, faster.
//
// torch's generator state (CPUGeneratorImpl::get_state, 5,056 bytes): a uint64 seed, int32
// `left`, int32 `seeded`, uint64 `next`, then the 624 state words each as a uint64, then normal
// sampling caches this code leaves alone. Each draw decrements `left`; when it reaches 0 the state
// is twisted (left = 624, next = 0); the draw returns state[next++], tempered.

#include <cstdint>
#include <cstring>

namespace {

constexpr int kN = 624, kM = 397;
constexpr int kLeftAt = 8, kNextAt = 16, kStateAt = 24;  // byte offsets in torch's state

inline uint32_t mix(uint32_t u, uint32_t v) {
  uint32_t y = (u & 0x80000000u) | (v & 0x7fffffffu);
  return (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
}

// The standard MT19937 recurrence over the whole state, as torch's next_state computes it.
void twist(uint32_t* s) {
  int i = 0;
  for (; i < kN - kM; ++i) s[i] = s[i + kM] ^ mix(s[i], s[i + 1]);
  for (; i < kN - 1; ++i) s[i] = s[i + kM - kN] ^ mix(s[i], s[i + 1]);
  s[kN - 1] = s[kM - 1] ^ mix(s[kN - 1], s[0]);
}

inline uint32_t temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

struct Twister {
  uint32_t s[kN];
  int32_t left;
  uint32_t next;

  // The next `count` outputs, as `count` calls of torch's mt19937::operator() would give them.
  void fill(uint32_t* out, int64_t count) {
    while (count > 0) {
      if (left == 1) {  // the next draw twists first; its value is then s[0]
        twist(s);
        left = kN + 1;
        next = 0;
      }
      int64_t take = left - 1 < count ? left - 1 : count;
      const uint32_t* src = s + next;
      for (int64_t j = 0; j < take; ++j) out[j] = temper(src[j]);
      out += take;
      count -= take;
      next += static_cast<uint32_t>(take);
      left -= static_cast<int32_t>(take);
    }
  }
};

}  // namespace

extern "C" {

// noise[i] = (u_i < keep) ? 1/keep : 0 for n float32 elements, u_i from torch's generator state
// `state` (advanced in place). 1/keep is computed in float, as div_ on a float tensor does.
// Returns 0, or -1 (nothing drawn, state untouched) for a state this code cannot read.
int dropout_noise(int64_t n, double keep, float* noise, unsigned char* state) {
  Twister g;
  uint64_t next64, word;
  std::memcpy(&g.left, state + kLeftAt, sizeof g.left);
  std::memcpy(&next64, state + kNextAt, sizeof next64);
  // torch keeps next + left == 625 once it has drawn (left == 1, next == 0 when just seeded);
  // a state that breaks it would make fill() read past the words: torch's own draw takes it.
  if (g.left < 1 || g.left > kN || next64 > kN) return -1;
  if (g.left != 1 && next64 + static_cast<uint64_t>(g.left) != kN + 1) return -1;
  g.next = static_cast<uint32_t>(next64);
  for (int i = 0; i < kN; ++i) {
    std::memcpy(&word, state + kStateAt + 8 * i, sizeof word);
    g.s[i] = static_cast<uint32_t>(word);
  }
  // u = v * 2^-53 with v the low 53 bits of (first << 32 | second): u < keep exactly when
  // v < ceil(keep * 2^53), an integer comparison.
  const double scaled = keep * 9007199254740992.0;
  uint64_t threshold = static_cast<uint64_t>(scaled);
  if (static_cast<double>(threshold) < scaled) threshold += 1;
  const float scale = 1.0f / static_cast<float>(keep);
  constexpr int64_t kChunk = 2048;
  uint32_t draws[2 * kChunk];
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t m = n - done < kChunk ? n - done : kChunk;
    g.fill(draws, 2 * m);
    float* out = noise + done;
    for (int64_t i = 0; i < m; ++i) {
      uint64_t v = ((static_cast<uint64_t>(draws[2 * i]) << 32) | draws[2 * i + 1]) &
                   ((uint64_t{1} << 53) - 1);
      out[i] = v < threshold ? scale : 0.0f;
    }
  }
  std::memcpy(state + kLeftAt, &g.left, sizeof g.left);
  next64 = g.next;
  std::memcpy(state + kNextAt, &next64, sizeof next64);
  for (int i = 0; i < kN; ++i) {
    word = g.s[i];
    std::memcpy(state + kStateAt + 8 * i, &word, sizeof word);
  }
  return 0;
}

}  // extern "C"
