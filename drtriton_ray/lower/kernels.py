"""The reference lowering's Triton kernels. They are real, importable kernels (tests launch them
directly) and also the text the emitter copies into standalone candidate modules, so each one is
self-contained: it may call only `tl`, `triton` and the combine functions defined here.

All kernels compute in float32 (the interpreter gets bfloat16 wrong, and fp32 accumulation is what
PyTorch does) and store in the output's element type. Shapes are padded to five dims, as the
synthesizer's; a reduction sees its input as (O, R, I): outer, reduced and inner extents.
"""
import triton
import triton.language as tl


@triton.jit
def max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def min_combine(a, b):
    return tl.minimum(a, b)


@triton.jit
def reduce_kernel(x_ptr, out_ptr, R, I, OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    """One program per (outer index, block of inner indices); loops over the reduced extent.
    OP: 0 sum, 1 mean, 2 amax, 3 amin, 4 argmax, 5 argmin, 6 var (unbiased), 7 L2 norm."""
    o = tl.program_id(0)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    base = x_ptr + o.to(tl.int64) * R * I
    acc = tl.zeros([BLOCK_I], dtype=tl.float32)
    if OP == 2 or OP == 4:
        acc = acc - float("inf")
    if OP == 3 or OP == 5:
        acc = acc + float("inf")
    best = tl.zeros([BLOCK_I], dtype=tl.int64)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < R) & (i[None, :] < I)
        if OP == 2 or OP == 4:
            other = -float("inf")
        elif OP == 3 or OP == 5:
            other = float("inf")
        else:
            other = 0.0
        x = tl.load(base + r[:, None] * I + i[None, :], mask=mask, other=other).to(tl.float32)
        if OP == 0 or OP == 1 or OP == 6:
            acc += tl.sum(x, axis=0)
        elif OP == 7:
            acc += tl.sum(x * x, axis=0)
        elif OP == 2:
            acc = tl.maximum(acc, tl.max(x, axis=0))
        elif OP == 3:
            acc = tl.minimum(acc, tl.min(x, axis=0))
        elif OP == 4:
            cand = tl.max(x, axis=0)
            idx = tl.argmax(x, axis=0).to(tl.int64) + r0
            best = tl.where(cand > acc, idx, best)  # strict: the first maximum wins, as in PyTorch
            acc = tl.maximum(acc, cand)
        else:
            cand = tl.min(x, axis=0)
            idx = tl.argmin(x, axis=0).to(tl.int64) + r0
            best = tl.where(cand < acc, idx, best)
            acc = tl.minimum(acc, cand)
    if OP == 6:  # second pass around the mean: no catastrophic cancellation
        mean = acc / R
        acc = tl.zeros([BLOCK_I], dtype=tl.float32)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + tl.arange(0, BLOCK_R)
            mask = (r[:, None] < R) & (i[None, :] < I)
            x = tl.load(base + r[:, None] * I + i[None, :], mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean[None, :], 0.0)
            acc += tl.sum(d * d, axis=0)
        acc = acc / (R - 1)
    if OP == 1:
        acc = acc / R
    if OP == 7:
        acc = tl.sqrt(acc)
    out = out_ptr + o.to(tl.int64) * I + i
    if OP == 4 or OP == 5:
        tl.store(out, best, mask=i < I)
    else:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=i < I)


@triton.jit
def along_dim_kernel(x_ptr, out_ptr, R, I, OP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    """Same-shape operators along the middle extent of (O, R, I), whole extent in one tile.
    OP: 0 softmax, 1 log_softmax, 2 cumsum, 3 cummax, 4 cummin."""
    o = tl.program_id(0)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    r = tl.arange(0, BLOCK_R)
    mask = (r[:, None] < R) & (i[None, :] < I)
    offs = o.to(tl.int64) * R * I + r[:, None] * I + i[None, :]
    if OP == 0 or OP == 1:
        x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)[None, :]
        e = tl.where(mask, tl.exp(shifted), 0.0)
        total = tl.sum(e, axis=0)[None, :]
        if OP == 0:
            y = e / total
        else:
            y = shifted - tl.log(total)
    else:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if OP == 2:
            y = tl.cumsum(x, axis=0)
        elif OP == 3:
            y = tl.associative_scan(x, 0, max_combine)
        else:
            y = tl.associative_scan(x, 0, min_combine)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def row_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, L, S, CPG, G, eps,
                    MODE: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK: tl.constexpr):
    """Normalise each contiguous row of L values. MODE: 0 layer norm (weights over the row),
    1 RMS norm, 2 group norm (row = one group of CPG channels x S positions; weights per
    channel), 3 instance norm (no weights)."""
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * L
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j0 in range(0, L, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        x = tl.load(base + j, mask=j < L, other=0.0).to(tl.float32)
        if MODE == 1:
            acc += x * x
        else:
            acc += x
    if MODE == 1:
        mean = 0.0
        scale = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / L + eps)
    else:
        mean = tl.sum(acc, axis=0) / L
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for j0 in range(0, L, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            x = tl.load(base + j, mask=j < L, other=0.0).to(tl.float32)
            d = tl.where(j < L, x - mean, 0.0)
            acc += d * d
        scale = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / L + eps)
    for j0 in range(0, L, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        m = j < L
        y = (tl.load(base + j, mask=m, other=0.0).to(tl.float32) - mean) * scale
        if MODE == 2:
            widx = (row % G) * CPG + j // S
        else:
            widx = j
        if HAS_W:
            y = y * tl.load(w_ptr + widx, mask=m, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(b_ptr + widx, mask=m, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * L + j, y.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def batch_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, C, S, eps, BLOCK: tl.constexpr):
    """Training-mode batch norm of x viewed as (N, C, S): one program per channel, statistics
    over N x S values (biased variance, as PyTorch normalises with)."""
    c = tl.program_id(0).to(tl.int64)
    count = N * S
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for n in range(0, N):
        for s0 in range(0, S, BLOCK):
            s = s0 + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + (n * C + c) * S + s, mask=s < S, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / count
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for n in range(0, N):
        for s0 in range(0, S, BLOCK):
            s = s0 + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + (n * C + c) * S + s, mask=s < S, other=0.0).to(tl.float32)
            d = tl.where(s < S, x - mean, 0.0)
            acc += d * d
    scale = tl.load(w_ptr + c).to(tl.float32) / tl.sqrt(tl.sum(acc, axis=0) / count + eps)
    shift = tl.load(b_ptr + c).to(tl.float32) - mean * scale
    for n in range(0, N):
        for s0 in range(0, S, BLOCK):
            s = s0 + tl.arange(0, BLOCK)
            offs = (n * C + c) * S + s
            x = tl.load(x_ptr + offs, mask=s < S, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, (x * scale + shift).to(out_ptr.dtype.element_ty), mask=s < S)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, B1, B2,
                  sa0, sa1, sa2, sam, sak, sb0, sb1, sb2, sbk, sbn,
                  HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[b] = A[b] @ B[b] (+ bias over N) for up to three broadcast batch dims given by strides
    (0 where a batch dim broadcasts); C is contiguous (B0, B1, B2, M, N)."""
    pid = tl.program_id(0)
    bid = tl.program_id(1)
    grid_n = tl.cdiv(N, BN)
    pm = pid // grid_n
    pn = pid % grid_n
    b2 = bid % B2
    b1 = (bid // B2) % B1
    b0 = bid // (B2 * B1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_base = a_ptr + b0.to(tl.int64) * sa0 + b1 * sa1 + b2 * sa2
    b_base = b_ptr + b0.to(tl.int64) * sb0 + b1 * sb1 + b2 * sb2
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + rk
        a = tl.load(a_base + rm[:, None] * sam + k[None, :] * sak,
                    mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0).to(tl.float32)
        b = tl.load(b_base + k[:, None] * sbk + rn[None, :] * sbn,
                    mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0).to(tl.float32)
        acc += tl.dot(a, b, input_precision="ieee")  # no TF32: float32 answers within 1e-4
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    c = c_ptr + bid.to(tl.int64) * M * N + rm[:, None] * N + rn[None, :]
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def strided_copy_kernel(src_ptr, dst_ptr, n, d1, d2, d3, d4,
                        ss0, ss1, ss2, ss3, ss4, ds0, ds1, ds2, ds3, ds4, BLOCK: tl.constexpr):
    """dst[idx] = src[idx] over a 5-dim index space (d0, d1, ..., d4), both sides by strides:
    transposes, and the slices of cat and stack."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i4 = offs % d4
    rest = offs // d4
    i3 = rest % d3
    rest = rest // d3
    i2 = rest % d2
    rest = rest // d2
    i1 = rest % d1
    i0 = rest // d1
    x = tl.load(src_ptr + i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3 + i4 * ss4, mask=mask)
    tl.store(dst_ptr + i0 * ds0 + i1 * ds1 + i2 * ds2 + i3 * ds3 + i4 * ds4, x, mask=mask)


@triton.jit
def triangle_kernel(x_ptr, out_ptr, n, H, W, diagonal, UPPER: tl.constexpr, BLOCK: tl.constexpr):
    """triu/tril over the last two dims of a contiguous tensor."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    col = offs % W
    row = (offs // W) % H
    if UPPER:
        keep = col - row >= diagonal
    else:
        keep = col - row <= diagonal
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(keep, x, tl.zeros_like(x)), mask=mask)


@triton.jit
def conv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_out, C, D, H, W, CO, OD, OH, OW, CIN_G, COUT_G,
                KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW,
                TRANSPOSED: tl.constexpr, BLOCK: tl.constexpr):
    """Direct (transposed) convolution over (N, C, D, H, W); 1-d and 2-d convs come as D = H = 1
    with unit kernel, stride and dilation there. A gather per output element: each program
    owns BLOCK flat output positions and loops over its group's input channels and the taps."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    ow = offs % OW
    oh = (offs // OW) % OH
    od = (offs // (OW * OH)) % OD
    co = (offs // (OW * OH * OD)) % CO
    n = offs // (OW * OH * OD * CO)
    g = co // COUT_G
    acc = tl.load(b_ptr + co, mask=mask, other=0.0).to(tl.float32)
    for ci in range(0, CIN_G):
        c = g * CIN_G + ci
        for kd in range(0, KD):
            for kh in range(0, KH):
                for kw in range(0, KW):
                    if TRANSPOSED:  # out = in * stride - pad + tap * dilation, solved for in
                        td = od + PD - kd * DD
                        th = oh + PH - kh * DH
                        tw = ow + PW - kw * DW
                        idd = td // SD
                        ih = th // SH
                        iw = tw // SW
                        ok = (td >= 0) & (th >= 0) & (tw >= 0) & (td % SD == 0) & (th % SH == 0) & (tw % SW == 0)
                        w_off = (((c * COUT_G + co % COUT_G) * KD + kd) * KH + kh) * KW + kw
                    else:
                        idd = od * SD - PD + kd * DD
                        ih = oh * SH - PH + kh * DH
                        iw = ow * SW - PW + kw * DW
                        ok = (idd >= 0) & (ih >= 0) & (iw >= 0)
                        w_off = (((co * CIN_G + ci) * KD + kd) * KH + kh) * KW + kw
                    ok = ok & (idd < D) & (ih < H) & (iw < W) & mask
                    x = tl.load(x_ptr + (((n * C + c) * D + idd) * H + ih) * W + iw, mask=ok, other=0.0)
                    acc += x.to(tl.float32) * tl.load(w_ptr + w_off, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def pool_kernel(x_ptr, out_ptr, n_out, D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW,
                IS_MAX: tl.constexpr, BLOCK: tl.constexpr):
    """Max or average pooling over (N*C, D, H, W); padding counts in the average, as PyTorch's
    default count_include_pad=True does (the window never leaves the padded input)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_out
    ow = offs % OW
    oh = (offs // OW) % OH
    od = (offs // (OW * OH)) % OD
    nc = offs // (OW * OH * OD)
    if IS_MAX:
        acc = tl.zeros([BLOCK], dtype=tl.float32) - float("inf")
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
    for kd in range(0, KD):
        for kh in range(0, KH):
            for kw in range(0, KW):
                idd = od * SD - PD + kd
                ih = oh * SH - PH + kh
                iw = ow * SW - PW + kw
                ok = (idd >= 0) & (ih >= 0) & (iw >= 0) & (idd < D) & (ih < H) & (iw < W) & mask
                ptr = x_ptr + ((nc * D + idd) * H + ih) * W + iw
                if IS_MAX:
                    acc = tl.maximum(acc, tl.load(ptr, mask=ok, other=-float("inf")).to(tl.float32))
                else:
                    acc += tl.load(ptr, mask=ok, other=0.0).to(tl.float32)
    if not IS_MAX:
        acc = acc / (KD * KH * KW)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
