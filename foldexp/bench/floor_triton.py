"""The floor's update kernels on CUDA: the Tree-LSTM updates (binary and leaf, forward and
backward) written out by hand in Triton, the measuring stick ``floor.py`` holds the engine to
(the engine's own cells on CUDA are Inductor's, ``executor/tape.py``). Imported only when a CUDA
floor is built; Triton resolves a kernel's helpers from its module's globals."""

import triton
import triton.language as tl


@triton.jit
def tanh(x):
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def elements(n_el, H, BLOCK: tl.constexpr):
    """This program's ``BLOCK`` elements of an ``(n, H)`` result: flat index, in range, row,
    column."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    r = idx // H
    return idx, idx < n_el, r, idx - r * H


@triton.jit
def through_output_gate(c, dh, dc, o, idx, ok, HAS_DH: tl.constexpr, HAS_DC: tl.constexpr):
    """Backward through ``h = o tanh(c)``: the output gate's gradient before its sigmoid, and
    the memory's gradient (``dc`` included)."""
    tc = tanh(tl.load(c + idx, mask=ok, other=0.0))
    dct = tl.zeros_like(tc)
    do = tl.zeros_like(tc)
    if HAS_DH:
        g = tl.load(dh + idx, mask=ok, other=0.0)
        do = g * tc * o * (1.0 - o)
        dct = g * o * (1.0 - tc * tc)
    if HAS_DC:
        dct = dct + tl.load(dc + idx, mask=ok, other=0.0)
    return do, dct


@triton.jit
def gates(z, r, j, H, sz, ok):
    """Rows ``r``, columns ``j`` of the update's gates: sigmoid of i, f_l, f_r, o; tanh of u."""
    zr = z + r * sz + j
    i = tl.sigmoid(tl.load(zr, mask=ok, other=0.0))
    fl = tl.sigmoid(tl.load(zr + H, mask=ok, other=0.0))
    fr = tl.sigmoid(tl.load(zr + 2 * H, mask=ok, other=0.0))
    o = tl.sigmoid(tl.load(zr + 3 * H, mask=ok, other=0.0))
    return i, fl, fr, o, tanh(tl.load(zr + 4 * H, mask=ok, other=0.0))


# n_el changes with every depth: one compiled kernel for all its values
@triton.jit(do_not_specialize=["n_el"])
def forward(z, cl, cr, mask, h, c, n_el, H, sz, scl, scr, sm, HAS_MASK: tl.constexpr,
            BLOCK: tl.constexpr):  # fmt: skip
    idx, ok, r, j = elements(n_el, H, BLOCK)
    i, fl, fr, o, u = gates(z, r, j, H, sz, ok)
    if HAS_MASK:
        u = u * tl.load(mask + r * sm + j, mask=ok, other=0.0)
    kl = tl.load(cl + r * scl + j, mask=ok, other=0.0)
    kr = tl.load(cr + r * scr + j, mask=ok, other=0.0)
    cv = i * u + fl * kl + fr * kr
    tl.store(c + idx, cv, mask=ok)
    tl.store(h + idx, o * tanh(cv), mask=ok)


@triton.jit(do_not_specialize=["n_el"])
def backward(z, cl, cr, mask, c, dh, dc, dz, dcl, dcr, n_el, H, sz, scl, scr, sm,
             HAS_MASK: tl.constexpr, HAS_DH: tl.constexpr, HAS_DC: tl.constexpr,
             BLOCK: tl.constexpr):  # fmt: skip
    idx, ok, r, j = elements(n_el, H, BLOCK)
    i, fl, fr, o, t = gates(z, r, j, H, sz, ok)
    u = t
    if HAS_MASK:
        u = t * tl.load(mask + r * sm + j, mask=ok, other=0.0)
    kl = tl.load(cl + r * scl + j, mask=ok, other=0.0)
    kr = tl.load(cr + r * scr + j, mask=ok, other=0.0)
    do, dct = through_output_gate(c, dh, dc, o, idx, ok, HAS_DH, HAS_DC)
    dzr = dz + r * (5 * H) + j
    tl.store(dzr, dct * u * i * (1.0 - i), mask=ok)
    tl.store(dzr + H, dct * kl * fl * (1.0 - fl), mask=ok)
    tl.store(dzr + 2 * H, dct * kr * fr * (1.0 - fr), mask=ok)
    tl.store(dzr + 3 * H, do, mask=ok)
    du = dct * i * (1.0 - t * t)
    if HAS_MASK:
        du = du * tl.load(mask + r * sm + j, mask=ok, other=0.0)
    tl.store(dzr + 4 * H, du, mask=ok)
    tl.store(dcl + idx, dct * fl, mask=ok)
    tl.store(dcr + idx, dct * fr, mask=ok)


@triton.jit
def leaf_gates(z, r, j, H, sz, ok):
    """Rows ``r``, columns ``j`` of a leaf's gates: sigmoid of i and o, tanh of u."""
    zr = z + r * sz + j
    i = tl.sigmoid(tl.load(zr, mask=ok, other=0.0))
    o = tl.sigmoid(tl.load(zr + H, mask=ok, other=0.0))
    return i, o, tanh(tl.load(zr + 2 * H, mask=ok, other=0.0))


@triton.jit(do_not_specialize=["n_el"])
def leaf_forward(z, mask, carry, h, c, n_el, H, sz, sm, sk, HAS_MASK: tl.constexpr,
                 HAS_CARRY: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    idx, ok, r, j = elements(n_el, H, BLOCK)
    i, o, u = leaf_gates(z, r, j, H, sz, ok)
    if HAS_MASK:
        u = u * tl.load(mask + r * sm + j, mask=ok, other=0.0)
    cv = i * u
    if HAS_CARRY:
        cv = cv + tl.load(carry + r * sk + j, mask=ok, other=0.0)
    tl.store(c + idx, cv, mask=ok)
    tl.store(h + idx, o * tanh(cv), mask=ok)


@triton.jit(do_not_specialize=["n_el"])
def leaf_backward(z, mask, c, dh, dc, dz, dk, n_el, H, sz, sm, HAS_MASK: tl.constexpr,
                  HAS_DH: tl.constexpr, HAS_DC: tl.constexpr, HAS_DK: tl.constexpr,
                  BLOCK: tl.constexpr):  # fmt: skip
    idx, ok, r, j = elements(n_el, H, BLOCK)
    i, o, t = leaf_gates(z, r, j, H, sz, ok)
    u = t
    if HAS_MASK:
        u = t * tl.load(mask + r * sm + j, mask=ok, other=0.0)
    do, dct = through_output_gate(c, dh, dc, o, idx, ok, HAS_DH, HAS_DC)
    dzr = dz + r * (3 * H) + j
    tl.store(dzr, dct * u * i * (1.0 - i), mask=ok)
    tl.store(dzr + H, do, mask=ok)
    du = dct * i * (1.0 - t * t)
    if HAS_MASK:
        du = du * tl.load(mask + r * sm + j, mask=ok, other=0.0)
    tl.store(dzr + 2 * H, du, mask=ok)
    if HAS_DK:
        tl.store(dk + idx, dct, mask=ok)
