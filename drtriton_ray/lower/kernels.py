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
def round_bf16(x):
    """float32 x rounded to the nearest bfloat16 (ties to even, NaN kept), as float32: what PyTorch's
    x.to(torch.bfloat16) holds. By its bits, because the interpreter's own conversion truncates."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    return tl.where(x == x, bits.to(tl.float32, bitcast=True), x)


@triton.jit
def flat_block(n, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """This program's BLOCK flat indices and their mask; WIDE: n >= 2^31, int64 index math."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < n


@triton.jit
def row_block(n, d4, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, WIDE: tl.constexpr):
    """This program's tile of the output viewed as rows of d4 contiguous values: BLOCK_R row indices, BLOCK_C
    column indices, their flat indices and mask. A broadcast input's offset is then a per-row part (divisions done
    BLOCK_R times, not once per element) plus the column times its innermost stride."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    col_blocks = tl.cdiv(d4, BLOCK_C)
    rows = pid // col_blocks * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid % col_blocks * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows < n // d4)[:, None] & (cols < d4)[None, :]
    return rows, cols, rows[:, None] * d4 + cols[None, :], mask


@triton.jit
def tile_block(n_rows: tl.constexpr, n_cols: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
               WIDE: tl.constexpr):
    """This program's tile of a constant (n_rows, n_cols) view (a broadcast elementwise kernel's output), the tiles of
    a band of BLOCK_R rows next to one another: BLOCK_R row and BLOCK_C column indices and a mask for each, so a leaf
    that varies along the rows alone loads once a row (leaf_tile). A mask is all true where the tiles fit that side
    exactly, and folds away. The column tile's start, pid % col_blocks * BLOCK_C, is written as a difference: the
    remainder's small bound let LLVM narrow the columns' divisions to 16-bit ones, which the GPU emulates."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    col_blocks: tl.constexpr = (n_cols + BLOCK_C - 1) // BLOCK_C
    band = pid // col_blocks
    rows = band * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid * BLOCK_C - band * (col_blocks * BLOCK_C) + tl.arange(0, BLOCK_C)
    if n_rows % BLOCK_R == 0:
        row_mask = tl.full([BLOCK_R], True, tl.int1)
    else:
        row_mask = rows < n_rows
    if n_cols % BLOCK_C == 0:
        col_mask = tl.full([BLOCK_C], True, tl.int1)
    else:
        col_mask = cols < n_cols
    return rows, cols, row_mask, col_mask


@triton.jit
def col_offset(cols, d4: tl.constexpr, s3: tl.constexpr, s4: tl.constexpr):
    """A leaf's offset at columns that span two dims (d3, d4), its strides s3 and s4: where it steps through both as
    through one (s3 = d4 * s4: contiguous there if s4 is 1, so its loads vectorise) cols * s4, else a division and a
    modulo by the constant d4 (multiplies and shifts), once a column of the tile."""
    if s3 == d4 * s4:
        off = cols * s4
    else:
        off = cols // d4 * s3 + cols % d4 * s4
    return off


@triton.jit
def leaf_tile(ptr, row_off, col_off, row_mask, col_mask, COLS: tl.constexpr):
    """A broadcast leaf's values on a tile, at row_off[:, None] + col_off[None, :], in float32. COLS: whether it
    varies along the columns (the sum of its strides there); where it does not, it loads once a row and broadcasts
    along it, not once a tile element (each lane of a row would load the one value)."""
    if COLS == 0:
        x = tl.load(ptr + row_off, mask=row_mask, other=0.0)[:, None]
    else:
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(ptr + (row_off[:, None] + col_off[None, :]), mask=mask, other=0.0)
    return x.to(tl.float32)


@triton.jit
def unravel4(rows, d1, d2, d3):
    """A row index over (d0, d1, d2, d3) to its four indices (d0 implied by the quotient)."""
    i3 = rows % d3
    rest = rows // d3
    i2 = rest % d2
    rest = rest // d2
    return rest // d1, rest % d1, i2, i3


@triton.jit
def unravel5(offs, d1, d2, d3, d4):
    """A flat index over (d0, d1, d2, d3, d4) to its five indices (d0 implied by the quotient)."""
    i4 = offs % d4
    rest = offs // d4
    i3 = rest % d3
    rest = rest // d3
    i2 = rest % d2
    rest = rest // d2
    return rest // d1, rest % d1, i2, i3, i4


@triton.jit
def reduce_kernel(x_ptr, out_ptr, R: tl.constexpr, I: tl.constexpr, n_cols: tl.constexpr, OP: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Reduce the middle extent of (O, R, I). Each of the O x I columns (stride I, R values) is independent; a
    program takes BLOCK_C consecutive ones, so many short columns make few programs, and loops over R.
    OP: 0 sum, 1 mean, 2 amax, 3 amin, 4 argmax, 5 argmin, 6 var (unbiased), 7 L2 norm. R, I and n_cols are
    constants (a program's shapes are fixed; the wrapper passes them by keyword, as a fused kernel's signature lists
    constexprs after its other arguments): a column's c // I and c % I are a multiply and shift, not a division by a
    runtime value, and the loop over R has a known trip count. The loop keeps a partial result per row lane and
    column (a BLOCK_R x BLOCK_C tile) and reduces across the lanes once, after it: each step is elementwise work on
    what it loaded, where a reduction across threads each step (shuffles, a barrier) held the next step's loads
    back (a sum over 301 rows of 1.8M columns at 64 x 64: 2.2 ms on an H200, at 16 x 64 0.74 ms)."""
    c = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < n_cols
    col = (c // I) * R * I + c % I  # flat index of each column's first value
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    if OP == 2 or OP == 4:
        acc = acc - float("inf")
    if OP == 3 or OP == 5:
        acc = acc + float("inf")
    best = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.int32)  # argmax/argmin: each lane's first row holding its best
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < R) & c_ok[None, :]
        if OP == 2 or OP == 4:
            other = -float("inf")
        elif OP == 3 or OP == 5:
            other = float("inf")
        else:
            other = 0.0
        x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=other).to(tl.float32)
        if OP == 0 or OP == 1 or OP == 6:
            acc += x
        elif OP == 7:
            acc += x * x
        elif OP == 2:
            acc = tl.maximum(acc, x)
        elif OP == 3:
            acc = tl.minimum(acc, x)
        elif OP == 4:
            best = tl.where(x > acc, r[:, None], best)  # strict: a lane keeps its first maximum, as PyTorch does
            acc = tl.maximum(acc, x)
        else:
            best = tl.where(x < acc, r[:, None], best)
            acc = tl.minimum(acc, x)
    total, first = reduce_lanes(acc, best, R, OP)  # across the lanes (argmax/argmin: the best's first row)
    if OP == 6:  # second pass around the mean: no catastrophic cancellation
        mean = total / R
        acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + tl.arange(0, BLOCK_R)
            mask = (r[:, None] < R) & c_ok[None, :]
            x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean[None, :], 0.0)
            acc += d * d
        total = tl.sum(acc, axis=0) / (R - 1)
    if OP == 1:
        total = total / R
    if OP == 7:
        total = tl.sqrt(total)
    if OP == 4 or OP == 5:
        tl.store(out_ptr + c, first, mask=c_ok)
    else:
        tl.store(out_ptr + c, total.to(out_ptr.dtype.element_ty), mask=c_ok)


@triton.jit
def along_dim_kernel(x_ptr, out_ptr, R: tl.constexpr, I: tl.constexpr, n_cols: tl.constexpr, OP: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, AXIS: tl.constexpr, ROW: tl.constexpr = 0,
                     WIDE: tl.constexpr = True):
    """Same-shape operators along the middle extent of (O, R, I): BLOCK_C columns as in reduce_kernel, each
    whole in one tile. OP: 0 softmax, 1 log_softmax, 2 cumsum, 3 cummax, 4 cummin. AXIS, the tile's axis along the
    extent: 0, a [BLOCK_R, BLOCK_C] tile whose columns sit side by side in memory (I > 1); 1, for the last dim
    (I == 1), a [BLOCK_C, BLOCK_R] tile of contiguous rows, so short rows load along memory instead of as BLOCK_R
    gathers R values apart. R, I and n_cols are constants, as in reduce_kernel (by keyword): AXIS 0's c // I and
    c % I per column are a multiply and shift, and a known row length gives the compiler the rows' alignment (vector
    loads: 16 bytes for rows of 4, 8 for rows of 6) and the tile's layout (a thread holds 2 to 4 values of a row, so
    fewer shuffles per reduction). ROW (AXIS 1): R again where the wrapper takes short rows as constant-length ones
    (short_rows, with a smaller tile: fewer registers), 0 otherwise. WIDE: int64 index math (n_cols * R may pass
    2^31); else int32, fewer registers and cheaper address math."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    c = pid * BLOCK_C + tl.arange(0, BLOCK_C)
    r = tl.arange(0, BLOCK_R)
    if AXIS == 0:
        mask = (r[:, None] < R) & (c < n_cols)[None, :]
        offs = ((c // I) * R * I + c % I)[None, :] + r[:, None] * I
    elif ROW > 0:
        mask = (c < n_cols)[:, None] & (r < ROW)[None, :]
        offs = c[:, None] * ROW + r[None, :]
    else:
        mask = (c < n_cols)[:, None] & (r < R)[None, :]
        offs = c[:, None] * R + r[None, :]
    if OP == 0 or OP == 1:
        x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
        shifted = x - tl.expand_dims(tl.max(x, axis=AXIS), AXIS)
        e = tl.where(mask, tl.exp(shifted), 0.0)
        total = tl.expand_dims(tl.sum(e, axis=AXIS), AXIS)
        if OP == 0:
            y = e / total
        else:
            y = shifted - tl.log(total)
    else:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        if OP == 2:  # a float64 running sum, as PyTorch's CPU kernel keeps: long sums with cancellation
            y = tl.cumsum(x.to(tl.float64), axis=AXIS)
        elif OP == 3:
            y = tl.associative_scan(x, AXIS, max_combine)
        else:
            y = tl.associative_scan(x, AXIS, min_combine)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def along_loop_kernel(x_ptr, out_ptr, R: tl.constexpr, I: tl.constexpr, n_cols: tl.constexpr, OP: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """along_dim_kernel for columns too long for one tile, BLOCK_R values at a time. Softmax and log-softmax in two
    passes, the first online: a running maximum, and a running sum rescaled by exp(old max - new max) when the
    maximum grows. Scans carry each column's running value from one block to the next. R, I and n_cols are
    constants, as in reduce_kernel (by keyword)."""
    c = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    col = (c // I) * R * I + c % I  # flat index of each column's first value
    if OP == 0 or OP == 1:
        top = tl.zeros([BLOCK_C], dtype=tl.float32) - float("inf")
        total = tl.zeros([BLOCK_C], dtype=tl.float32)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + tl.arange(0, BLOCK_R)
            mask = (r[:, None] < R) & (c < n_cols)[None, :]
            x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=-float("inf")).to(tl.float32)
            new_top = tl.maximum(top, tl.max(x, axis=0))
            e = tl.where(mask, tl.exp(x - new_top[None, :]), 0.0)
            total = total * tl.exp(top - new_top) + tl.sum(e, axis=0)
            top = new_top
    elif OP == 2:  # a float64 running sum, as along_dim_kernel's
        carry = tl.zeros([BLOCK_C], dtype=tl.float64)
    elif OP == 3:
        carry = tl.zeros([BLOCK_C], dtype=tl.float32) - float("inf")
    else:
        carry = tl.zeros([BLOCK_C], dtype=tl.float32) + float("inf")
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < R) & (c < n_cols)[None, :]
        if OP == 3:
            other = -float("inf")
        elif OP == 4:
            other = float("inf")
        else:
            other = 0.0
        x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=other).to(tl.float32)
        if OP == 0:
            y = tl.exp(x - top[None, :]) / total[None, :]
        elif OP == 1:
            y = x - top[None, :] - tl.log(total)[None, :]
        elif OP == 2:
            y = tl.cumsum(x.to(tl.float64), axis=0) + carry[None, :]
            carry += tl.sum(x.to(tl.float64), axis=0)
        elif OP == 3:
            y = tl.maximum(tl.associative_scan(x, 0, max_combine), carry[None, :])
            carry = tl.maximum(carry, tl.max(x, axis=0))
        else:
            y = tl.minimum(tl.associative_scan(x, 0, min_combine), carry[None, :])
            carry = tl.minimum(carry, tl.min(x, axis=0))
        tl.store(out_ptr + col[None, :] + r[:, None] * I, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_stats_kernel(x_ptr, stats_ptr, R: tl.constexpr, I: tl.constexpr, n_cols: tl.constexpr, LOG: tl.constexpr,
                         BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, WIDE: tl.constexpr):
    """The statistics of a softmax (LOG 0) or log-softmax (LOG 1) along the middle extent of (O, R, I), for a
    reduction that recomputes the values where it loads x (softmax_reduce_kernel), so that they are never written:
    column c's maximum m at stats[c] and, at stats[n_cols + c], 1 / s (softmax: y = exp(x - m) * (1 / s)) or log s
    (log-softmax: y = x - m - log s), s the column's sum of exp(x - m); LOG 2: the log-sum-exp m + log s alone, at
    stats[c] (stats is then the output). One pass over x, online as along_loop_kernel's
    first: a running maximum, and the running sum rescaled by exp(old max - new max) where it grows. BLOCK_C columns
    side by side, BLOCK_R values of each a step. R, I and n_cols are constants (by keyword, as reduce_kernel's).
    WIDE: int64 index math (x has 2^31 values or more); else int32."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    c = pid * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < n_cols
    col = (c // I) * R * I + c % I  # flat index of each column's first value
    top = tl.zeros([BLOCK_C], dtype=tl.float32) - float("inf")
    total = tl.zeros([BLOCK_C], dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < R) & c_ok[None, :]
        x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=-float("inf")).to(tl.float32)
        new_top = tl.maximum(top, tl.max(x, axis=0))
        e = tl.where(mask, tl.exp(x - new_top[None, :]), 0.0)
        total = total * tl.exp(top - new_top) + tl.sum(e, axis=0)
        top = new_top
    if LOG == 2:
        tl.store(stats_ptr + c, top + tl.log(total), mask=c_ok)
    else:
        if LOG:
            second = tl.log(total)
        else:
            second = 1.0 / total
        tl.store(stats_ptr + c, top, mask=c_ok)
        tl.store(stats_ptr + n_cols + c, second, mask=c_ok)


@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, loss_ptr, group, x_group, x_row, t_group, t_row, V: tl.constexpr,
                         IGNORE: tl.constexpr, COUNT: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """Cross-entropy of one row of logits x (rows of V contiguous values) against its target class: the row's
    log-sum-exp in one pass over it (online: a running maximum, the running sum of exp rescaled where the maximum
    grows), less the target's logit; 0 where the target is IGNORE (Hugging Face's -100 for padding). The loss goes
    to loss[row]; with COUNT, 1.0 (counted) or 0.0 (ignored) to loss[rows + row], for the mean. Row r sits at
    (r // group) * x_group + (r % group) * x_row of x, its target at the same with t_group and t_row: rows of up to
    two dims read in place (a causal LM's logits[:, :-1] and labels[:, 1:]). V is a constant (by keyword); WIDE:
    int64 index math (x spans 2^31 values or more)."""
    row = tl.program_id(0)
    rows = tl.num_programs(0)
    if WIDE:
        row = row.to(tl.int64)
    outer, inner = row // group, row % group
    base = x_ptr + outer * x_group + inner * x_row
    top = -float("inf")
    total = 0.0
    for v0 in range(0, V, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
        new_top = tl.maximum(top, tl.max(x, axis=0))
        total = total * tl.exp(top - new_top) + tl.sum(tl.exp(x - new_top), axis=0)
        top = new_top
    target = tl.load(target_ptr + outer * t_group + inner * t_row)
    counted = target != IGNORE
    picked = tl.load(base + target, mask=counted, other=0.0).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(counted, top + tl.log(total) - picked, 0.0))
    if COUNT:
        tl.store(loss_ptr + rows + row, tl.where(counted, 1.0, 0.0))


@triton.jit
def cross_entropy_total_kernel(loss_ptr, out_ptr, rows, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """The sum of cross_entropy_kernel's row losses, or (MEAN) their mean over the counted rows (PyTorch's nan where
    none is): one program."""
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    count = tl.zeros([BLOCK], dtype=tl.float32)
    for r0 in range(0, rows, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + r, mask=r < rows, other=0.0)
        count += tl.load(loss_ptr + rows + r, mask=r < rows, other=0.0)
    total = tl.sum(acc, axis=0)
    if MEAN:
        total = total / tl.sum(count, axis=0)
    tl.store(out_ptr, total)


@triton.jit
def softmax_values(x, stats_ptr, st, r, mask, top, scale, R: tl.constexpr, NS: tl.constexpr, RS: tl.constexpr,
                   LOG: tl.constexpr, STATS: tl.constexpr):
    """Softmax (LOG 0: exp(x - m) * (1 / s)) or log-softmax (LOG 1: x - m - log s) values of a [rows, columns] tile
    of x, from softmax_stats_kernel's statistics (m at index k, 1 / s or log s at NS + k). STATS, where a value's
    are: 0 at st[column] + r * RS; 1 at st + r * RS (st a scalar: the tile's columns share theirs); 2 top and scale,
    its column's, loaded once by the caller."""
    if STATS == 0:
        at = st[None, :] + r[:, None] * RS
        top = tl.load(stats_ptr + at, mask=mask, other=0.0)
        scale = tl.load(stats_ptr + NS + at, mask=mask, other=0.0)
    elif STATS == 1:
        at = st + r * RS
        top = tl.load(stats_ptr + at, mask=r < R, other=0.0)[:, None]
        scale = tl.load(stats_ptr + NS + at, mask=r < R, other=0.0)[:, None]
    else:
        top = top[None, :]
        scale = scale[None, :]
    if LOG:
        y = x - top - scale
    else:
        y = tl.exp(x - top) * scale
    return y


@triton.jit
def reduce_step(acc, best, y, mask, r, OP: tl.constexpr):
    """One step of a reduction along axis 0 of a [rows, columns] tile, kept per row lane as reduce_kernel keeps it:
    acc and, for an arg reduction, best (each lane's first row holding its extreme) updated elementwise, masked
    values left out. reduce_lanes combines the lanes after the loop. OP as reduce_kernel's."""
    if OP == 0 or OP == 1 or OP == 6:
        acc += tl.where(mask, y, 0.0)
    elif OP == 7:
        acc += tl.where(mask, y * y, 0.0)
    elif OP == 2 or OP == 4:
        y = tl.where(mask, y, -float("inf"))
        if OP == 4:  # strict: a lane keeps its first maximum, as PyTorch does
            best = tl.where(y > acc, r[:, None], best)
        acc = tl.maximum(acc, y)
    else:
        y = tl.where(mask, y, float("inf"))
        if OP == 5:
            best = tl.where(y < acc, r[:, None], best)
        acc = tl.minimum(acc, y)
    return acc, best


@triton.jit
def reduce_lanes(acc, best, R: tl.constexpr, OP: tl.constexpr):
    """(result, arg) over reduce_step's lanes: their sum, maximum or minimum, and for argmax/argmin the first row of
    the lanes holding the extreme (PyTorch's tie rule; 0 otherwise)."""
    if OP == 2 or OP == 4:
        total = tl.max(acc, axis=0)
    elif OP == 3 or OP == 5:
        total = tl.min(acc, axis=0)
    else:
        total = tl.sum(acc, axis=0)
    if OP == 4 or OP == 5:
        first = tl.min(tl.where(acc == total[None, :], best, R), axis=0).to(tl.int64)
    else:
        first = tl.zeros(total.shape, dtype=tl.int64)
    return total, first


@triton.jit
def softmax_reduce_kernel(x_ptr, stats_ptr, out_ptr, R: tl.constexpr, I: tl.constexpr, SEG: tl.constexpr,
                          SR: tl.constexpr, SI: tl.constexpr, NS: tl.constexpr, RS: tl.constexpr, OP: tl.constexpr,
                          LOG: tl.constexpr, STATS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                          WIDE: tl.constexpr):
    """A reduction of a softmax's (LOG 0) or log-softmax's (LOG 1) output that is never written: each value is
    recomputed where x is loaded, from x and its softmax column's statistics (softmax_stats_kernel's over x viewed
    as (SO, SR, SI) along the softmax's dim, NS columns): x is read twice in all (statistics, reduction), where the
    softmax's kernel read it once or twice and wrote its output for reduce_kernel to read back. The reduction is
    reduce_kernel's: the middle extent of (O, R, I), OP 0 sum, 1 mean, 2 amax, 3 amin, 4 argmax, 5 argmin, 6 var, 7
    L2 norm; a program takes BLOCK_C columns of one segment of SEG consecutive ones and loops over R. RS: the
    statistics' stride along the reduced dim. STATS, how a tile reads them: 0 a value per element; 1 a value per
    row, where the columns of a segment differ only along the softmax's dim (SEG = SR) and so share theirs; 2 a
    value per column, loaded once (the reduced dim is the softmax's, RS = 0). Sizes are constants (by keyword, as
    reduce_kernel's). WIDE: int64 index math (x has 2^31 values or more); else int32."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    BLOCKS: tl.constexpr = (SEG + BLOCK_C - 1) // BLOCK_C  # programs per segment
    k = pid % BLOCKS * BLOCK_C + tl.arange(0, BLOCK_C)
    c = pid // BLOCKS * SEG + k
    c_ok = k < SEG
    col = (c // I) * R * I + c % I  # flat index of each column's first value
    if STATS == 1:  # the statistics index of the segment's first column, which its columns share
        first = pid // BLOCKS * SEG
        col0 = (first // I) * R * I + first % I
        st = (col0 // (SR * SI)) * SI + col0 % SI
    else:
        st = (col // (SR * SI)) * SI + col % SI
    if STATS == 2:
        top = tl.load(stats_ptr + st, mask=c_ok, other=0.0)
        scale = tl.load(stats_ptr + NS + st, mask=c_ok, other=0.0)
    else:
        top = 0.0
        scale = 0.0
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)  # a partial result per row lane, as reduce_kernel's
    if OP == 2 or OP == 4:
        acc = acc - float("inf")
    if OP == 3 or OP == 5:
        acc = acc + float("inf")
    best = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.int32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < R) & c_ok[None, :]
        x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=0.0).to(tl.float32)
        y = softmax_values(x, stats_ptr, st, r, mask, top, scale, R, NS, RS, LOG, STATS)
        acc, best = reduce_step(acc, best, y, mask, r, OP)
    total, first = reduce_lanes(acc, best, R, OP)
    if OP == 6:  # second pass around the mean, as reduce_kernel's
        mean = total / R
        acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
        for r0 in range(0, R, BLOCK_R):
            r = r0 + tl.arange(0, BLOCK_R)
            mask = (r[:, None] < R) & c_ok[None, :]
            x = tl.load(x_ptr + col[None, :] + r[:, None] * I, mask=mask, other=0.0).to(tl.float32)
            y = softmax_values(x, stats_ptr, st, r, mask, top, scale, R, NS, RS, LOG, STATS)
            d = tl.where(mask, y - mean[None, :], 0.0)
            acc += d * d
        total = tl.sum(acc, axis=0) / (R - 1)
    if OP == 1:
        total = total / R
    if OP == 7:
        total = tl.sqrt(total)
    if OP == 4 or OP == 5:
        tl.store(out_ptr + c, first, mask=c_ok)
    else:
        tl.store(out_ptr + c, total.to(out_ptr.dtype.element_ty), mask=c_ok)


@triton.jit
def row_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, L: tl.constexpr, S: tl.constexpr, CPG: tl.constexpr,
                    G: tl.constexpr, MODE: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    BLOCK_ROWS: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr, n_rows):
    """Normalise each contiguous row of L values, BLOCK_ROWS rows per program (many short rows make few
    programs). MODE: 0 layer norm (weights over the row), 1 RMS norm, 2 group norm (row = one group of CPG
    channels x S positions; weights per channel), 3 instance norm (no weights). The sizes are constants: a group
    norm's channel index j // S is a shift or a multiply, not a division per value. The row count is an argument:
    it moves with a model's batch and tokens, and it only masks rows, so a new count does not compile the kernel
    again. WIDE: the tensor has 2^31 values or more (int64 index math, int32 otherwise)."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    if WIDE:
        rows = rows.to(tl.int64)
    row_ok = rows < n_rows
    acc = tl.zeros([BLOCK_ROWS, BLOCK], dtype=tl.float32)
    for j0 in range(0, L, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        m = row_ok[:, None] & (j < L)[None, :]
        x = tl.load(x_ptr + rows[:, None] * L + j[None, :], mask=m, other=0.0).to(tl.float32)
        if MODE == 1:
            acc += x * x
        else:
            acc += x
    if MODE == 1:
        mean = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
        scale = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / L + eps)
    else:
        mean = tl.sum(acc, axis=1) / L
        acc = tl.zeros([BLOCK_ROWS, BLOCK], dtype=tl.float32)
        for j0 in range(0, L, BLOCK):
            j = j0 + tl.arange(0, BLOCK)
            m = row_ok[:, None] & (j < L)[None, :]
            x = tl.load(x_ptr + rows[:, None] * L + j[None, :], mask=m, other=0.0).to(tl.float32)
            d = tl.where(m, x - mean[:, None], 0.0)
            acc += d * d
        scale = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / L + eps)
    for j0 in range(0, L, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        m = row_ok[:, None] & (j < L)[None, :]
        # each value once (a kept prologue value is stored here: lower/fuse.py)
        x = tl.load(x_ptr + rows[:, None] * L + j[None, :], mask=m, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * scale[:, None]
        if MODE == 2:  # weights per channel: the row's group, then the channel within it
            widx = (rows % G)[:, None] * CPG + (j // S)[None, :]
        else:
            widx = j[None, :]
        if HAS_W:
            y = y * tl.load(w_ptr + widx, mask=(j < L)[None, :], other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(b_ptr + widx, mask=(j < L)[None, :], other=0.0).to(tl.float32)
        tl.store(out_ptr + rows[:, None] * L + j[None, :], y.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def row_norm_persistent_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, L: tl.constexpr, MODE: tl.constexpr,
                               HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                               BLOCK: tl.constexpr, WIDE: tl.constexpr, n_rows):
    """A layer or RMS norm (MODE 0, 1: weights over the row) of rows of L <= BLOCK values, BLOCK_ROWS rows a tile,
    each row whole in registers: x is read once, out written once. Persistent: program p takes row blocks p, p +
    grid, ..., loads the weights once, and loads its next block before it normalises this one, so that those loads
    are in flight under this block's reductions, epilogue and stores (a program per row waits for its row, then
    computes with nothing in flight). The sizes are constants but the row count (row_norm_kernel's); WIDE: int64
    index math (the rows a last prefetch reaches past n_rows included, x's offsets pass 2^31)."""
    j = tl.arange(0, BLOCK)
    j_ok = j < L
    if HAS_W:
        w = tl.load(w_ptr + j, mask=j_ok, other=0.0).to(tl.float32)
    if HAS_B:
        b = tl.load(b_ptr + j, mask=j_ok, other=0.0).to(tl.float32)
    step = tl.num_programs(0) * BLOCK_ROWS
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    if WIDE:
        rows = rows.to(tl.int64)
    m = (rows < n_rows)[:, None] & j_ok[None, :]
    # each value once (a kept prologue value is stored here: lower/fuse.py)
    x = tl.load(x_ptr + rows[:, None] * L + j[None, :], mask=m, other=0.0).to(tl.float32)
    for _ in range(tl.program_id(0) * BLOCK_ROWS, n_rows, step):
        nxt = rows + step
        m_next = (nxt < n_rows)[:, None] & j_ok[None, :]
        # each value once (a kept prologue value is stored here: lower/fuse.py)
        x_next = tl.load(x_ptr + nxt[:, None] * L + j[None, :], mask=m_next, other=0.0).to(tl.float32)
        if MODE == 1:
            y = x * (1.0 / tl.sqrt(tl.sum(x * x, axis=1) / L + eps))[:, None]
        else:  # the variance around the mean, from the rows in registers: no cancellation, no second read
            d = tl.where(m, x - (tl.sum(x, axis=1) / L)[:, None], 0.0)
            y = d * (1.0 / tl.sqrt(tl.sum(d * d, axis=1) / L + eps))[:, None]
        if HAS_W:
            y = y * w[None, :]
        if HAS_B:
            y = y + b[None, :]
        tl.store(out_ptr + rows[:, None] * L + j[None, :], y.to(out_ptr.dtype.element_ty), mask=m)
        x = x_next
        rows = nxt
        m = m_next


@triton.jit
def norm_reduce_kernel(x_ptr, w_ptr, b_ptr, out_ptr, eps, O: tl.constexpr, R: tl.constexpr, M: tl.constexpr,
                       L: tl.constexpr, SPLIT: tl.constexpr, MODE: tl.constexpr, OP: tl.constexpr,
                       HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """A layer or RMS norm over rows of L values (MODE 0, 1, weights over the row) reduced across rows: x viewed as
    (O, R, M, L), out[o, m, :] = OP over r of norm(x[o, r, m, :]), OP as reduce_kernel's (0 sum, 1 mean, 2 amax,
    3 amin, 7 L2 norm). A program keeps one (o, m)'s L accumulators in registers and streams its share of the R
    rows, each a single tile normalised where it is loaded: x is read once and the normalised tensor is never
    written. SPLIT programs share the R rows of an (o, m), so that few (o, m) still fill the GPU; each stores its
    partial result (a mean's share divided by R, a norm's partial root) at out_ptr + its split * O * M * L, and
    reduce_kernel combines the splits. WIDE: int64 index math (x has 2^31 values or more)."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    group = pid // SPLIT
    part = pid % SPLIT
    o = group // M
    m = group % M
    j = tl.arange(0, BLOCK)
    j_ok = j < L
    if HAS_W:
        w = tl.load(w_ptr + j, mask=j_ok, other=0.0).to(tl.float32)
    if HAS_B:
        b = tl.load(b_ptr + j, mask=j_ok, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    if OP == 2:
        acc = acc - float("inf")
    if OP == 3:
        acc = acc + float("inf")
    STEPS: tl.constexpr = (R + SPLIT - 1) // SPLIT  # rows per split, the last split's fewer
    for r in range(part * STEPS, tl.minimum(part * STEPS + STEPS, R)):
        x = tl.load(x_ptr + ((o * R + r) * M + m) * L + j, mask=j_ok, other=0.0).to(tl.float32)
        if MODE == 1:
            y = x * (1.0 / tl.sqrt(tl.sum(x * x, axis=0) / L + eps))
        else:  # the variance around the mean, from the row in registers: no cancellation, no second read
            d = tl.where(j_ok, x - tl.sum(x, axis=0) / L, 0.0)
            y = d * (1.0 / tl.sqrt(tl.sum(d * d, axis=0) / L + eps))
        if HAS_W:
            y = y * w
        if HAS_B:
            y = y + b
        if OP == 2:
            acc = tl.maximum(acc, y)
        elif OP == 3:
            acc = tl.minimum(acc, y)
        elif OP == 7:
            acc += y * y
        else:
            acc += y
    if OP == 1:
        acc = acc / R
    if OP == 7:
        acc = tl.sqrt(acc)
    tl.store(out_ptr + (part * O * M + group) * L + j, acc.to(out_ptr.dtype.element_ty), mask=j_ok)


@triton.jit
def channel_tile(c, c_ok, m0, count, S, C, BLOCK: tl.constexpr):
    """Offsets and mask of values m0 .. m0 + BLOCK of each channel c of x viewed as (N, C, S)."""
    m = m0 + tl.arange(0, BLOCK)
    return c[:, None] * S + (m // S * C * S + m % S)[None, :], c_ok[:, None] & (m < count)[None, :]


@triton.jit
def batch_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, C, S, eps, BLOCK_C: tl.constexpr, BLOCK: tl.constexpr):
    """Training-mode batch norm of x viewed as (N, C, S): statistics per channel over its N x S values (biased
    variance, as PyTorch normalises with). A program takes BLOCK_C channels (many channels of few values make
    few programs) and their values BLOCK at a time, across images."""
    c = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    count = N * S
    acc = tl.zeros([BLOCK_C, BLOCK], dtype=tl.float32)
    for m0 in range(0, count, BLOCK):
        offs, mask = channel_tile(c, c_ok, m0, count, S, C, BLOCK)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        acc += x
    mean = tl.sum(acc, axis=1) / count
    acc = tl.zeros([BLOCK_C, BLOCK], dtype=tl.float32)
    for m0 in range(0, count, BLOCK):
        offs, mask = channel_tile(c, c_ok, m0, count, S, C, BLOCK)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean[:, None], 0.0)
        acc += d * d
    scale = tl.load(w_ptr + c, mask=c_ok, other=0.0).to(tl.float32) / tl.sqrt(tl.sum(acc, axis=1) / count + eps)
    # centred before scaling: x * scale + (b - mean * scale) cancels catastrophically where |mean| >> std
    bias = tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    for m0 in range(0, count, BLOCK):
        offs, mask = channel_tile(c, c_ok, m0, count, S, C, BLOCK)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * scale[:, None] + bias[:, None]
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def norm_tile(row, t, SEGS: tl.constexpr, SEG: tl.constexpr, SEG_STRIDE: tl.constexpr, ROW_STRIDE: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    """Tile t of a split norm's row: BLOCK_N of its SEGS segments x BLOCK of each one's SEG contiguous values (segment
    n of row r starts at r * ROW_STRIDE + n * SEG_STRIDE). Returns the segment and value indices, offsets and mask;
    the divisions are per tile, not per value, and by constants (multiplies and shifts)."""
    seg_blocks = (SEG + BLOCK - 1) // BLOCK
    n = (t // seg_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    j = (t % seg_blocks) * BLOCK + tl.arange(0, BLOCK)
    offs = row * ROW_STRIDE + n.to(tl.int64)[:, None] * SEG_STRIDE + j[None, :]
    return n, j, offs, (n < SEGS)[:, None] & (j < SEG)[None, :]


@triton.jit
def tile_count(t, SEGS: tl.constexpr, SEG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    """How many of norm_tile's values of tile t are in the row (its mask's count), from the geometry: a scalar."""
    seg_blocks = (SEG + BLOCK - 1) // BLOCK
    segs = tl.minimum(SEGS - (t // seg_blocks) * BLOCK_N, BLOCK_N)
    return segs * tl.minimum(SEG - (t % seg_blocks) * BLOCK, BLOCK)


@triton.jit
def norm_stats_kernel(x_ptr, part_ptr, SEGS: tl.constexpr, SEG: tl.constexpr, SEG_STRIDE: tl.constexpr,
                      ROW_STRIDE: tl.constexpr, TILES: tl.constexpr, SPLIT_TILES: tl.constexpr, MODE: tl.constexpr,
                      BLOCK_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    """First kernel of a norm over few long rows (split_norm): program (row, split) takes SPLIT_TILES of the row's
    TILES tiles and writes their statistics (mean, M2: the sum of squared deviations from that mean, count) to
    part[row, split] (BLOCK_SPLITS per row). One pass of shifted sums: each lane adds its values' deviations from a
    shift, the mean of the program's first tile, and their squares (a subtract, an add and an FMA a value: no
    division, no per-lane count; the count is a scalar a tile, from the geometry). M2 = sum(d^2) - sum(d)^2 / n
    cancels only as far as the program's mean lies from the shift, in units of its spread: a constant offset
    (|mean| >> std) is gone with the shift. MODE 1 (RMS norm) keeps the sum of squares in M2, its mean 0. A row is
    SEGS segments of SEG values: see split_norm_setup. The geometry is constant (by keyword, as the wrapper passes a
    fused kernel's constexprs): a tile's divisions are multiplies and shifts, the loop's bound is known."""
    row = tl.program_id(0).to(tl.int64)
    t0 = tl.program_id(1) * SPLIT_TILES
    if MODE == 1:
        shift = 0.0
    else:  # a shift near the mean: the sums hold deviations, which round far less than the values
        n, j, offs, mask = norm_tile(row, t0, SEGS, SEG, SEG_STRIDE, ROW_STRIDE, BLOCK_N, BLOCK)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        shift = tl.sum(x) / tile_count(t0, SEGS, SEG, BLOCK_N, BLOCK)
    total = 0.0
    acc = tl.zeros([BLOCK_N, BLOCK], dtype=tl.float32)
    sq = tl.zeros([BLOCK_N, BLOCK], dtype=tl.float32)
    for t in range(t0, tl.minimum(t0 + SPLIT_TILES, TILES)):
        n, j, offs, mask = norm_tile(row, t, SEGS, SEG, SEG_STRIDE, ROW_STRIDE, BLOCK_N, BLOCK)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        total += tile_count(t, SEGS, SEG, BLOCK_N, BLOCK)
        if MODE == 1:
            sq += x * x
        else:
            d = tl.where(mask, x - shift, 0.0)
            acc += d
            sq += d * d
    mean = tl.sum(acc) / total
    part = part_ptr + (row * BLOCK_SPLITS + tl.program_id(1)) * 3
    tl.store(part, shift + mean)
    tl.store(part + 1, tl.maximum(tl.sum(sq) - mean * tl.sum(acc), 0.0))
    tl.store(part + 2, total)


@triton.jit
def norm_apply_kernel(x_ptr, part_ptr, w_ptr, b_ptr, out_ptr, G, eps, SEGS: tl.constexpr, SEG: tl.constexpr,
                      SEG_STRIDE: tl.constexpr, ROW_STRIDE: tl.constexpr, TILES: tl.constexpr,
                      SPLIT_TILES: tl.constexpr, MODE: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                      BLOCK_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK: tl.constexpr):
    """Second kernel of split_norm: program (row, split) merges the row's partial statistics (a few, from
    norm_stats_kernel; Chan's merge around the first part's mean) and normalises the same tiles. MODE: 0 layer norm
    (weights over the row), 1 RMS norm, 2 group norm (row = one group, a segment per channel: weights per segment),
    3 instance norm (no weights), 4 batch norm (row = one channel: one weight). The geometry is constant, as in
    norm_stats_kernel."""
    row = tl.program_id(0).to(tl.int64)
    t0 = tl.program_id(1) * SPLIT_TILES
    s = tl.arange(0, BLOCK_SPLITS)
    part = part_ptr + (row * BLOCK_SPLITS + s) * 3
    ok = s < tl.num_programs(1)
    count = tl.load(part + 2, mask=ok, other=0.0)
    ref = tl.load(part_ptr + row * BLOCK_SPLITS * 3)
    mean = ref + tl.sum(count * (tl.load(part, mask=ok, other=0.0) - ref)) / tl.sum(count)
    d = tl.load(part, mask=ok, other=0.0) - mean
    scale = 1.0 / tl.sqrt(tl.sum(tl.load(part + 1, mask=ok, other=0.0) + count * d * d) / tl.sum(count) + eps)
    if MODE == 4:  # one channel's weight and bias, loaded once
        w = tl.load(w_ptr + row).to(tl.float32)
        b = tl.load(b_ptr + row).to(tl.float32)
    for t in range(t0, tl.minimum(t0 + SPLIT_TILES, TILES)):
        n, j, offs, mask = norm_tile(row, t, SEGS, SEG, SEG_STRIDE, ROW_STRIDE, BLOCK_N, BLOCK)
        # each value once (a kept prologue value is stored here: lower/fuse.py)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * scale
        if MODE == 4:
            y = y * w + b
        elif MODE == 2:  # the channel: the row's group, then the segment within it
            if HAS_W:
                y = y * tl.load(w_ptr + (row % G) * SEGS + n, mask=n < SEGS, other=0.0).to(tl.float32)[:, None]
            if HAS_B:
                y = y + tl.load(b_ptr + (row % G) * SEGS + n, mask=n < SEGS, other=0.0).to(tl.float32)[:, None]
        else:
            if HAS_W:
                y = y * tl.load(w_ptr + n[:, None] * SEG + j[None, :], mask=mask, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(b_ptr + n[:, None] * SEG + j[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, out_ptr, bias_ptr, M, N, K, B1, B2,
                  sa0, sa1, sa2, sam, sak, sb0, sb1, sb2, sbk, sbn,
                  HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  GROUP_M: tl.constexpr, HALF: tl.constexpr):
    """C[b] = A[b] @ B[b] (+ bias over N) for up to three broadcast batch dims given by strides
    (0 where a batch dim broadcasts); C is contiguous (B0, B1, B2, M, N). Programs are (batch, tile) pairs, flat
    on grid axis 0: batches can outnumber the 65535 programs of the other axes. As in Triton's matmul tutorial,
    the operand pointers advance along K and tiles go in groups of GROUP_M tile rows: the group's programs sweep
    B's columns together, so a tile of B is read from memory once a group, not once a tile row (B of an LLM's
    lm_head, 2k x 32k, is larger than L2). HALF: both operands 16-bit of one dtype, multiplied on tensor cores in
    that dtype (products exact, summed in float32, as cuBLAS does); else both widened to float32, no TF32 (float32
    answers within 1e-4). int64 indices and no tl.cdiv, for the interpreter (see conv_kernel)."""
    pid = tl.program_id(0).to(tl.int64)
    grid_m = (M + BM - 1) // BM
    grid_n = (N + BN - 1) // BN
    tiles = grid_m * grid_n
    bid = pid // tiles
    tile = pid % tiles
    first_m = tile // (GROUP_M * grid_n) * GROUP_M
    rows = tl.minimum(grid_m - first_m, GROUP_M)
    pm = first_m + tile % (GROUP_M * grid_n) % rows
    pn = tile % (GROUP_M * grid_n) // rows
    b2 = bid % B2
    b1 = (bid // B2) % B1
    b0 = bid // (B2 * B1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + b0 * sa0 + b1 * sa1 + b2 * sa2 + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + b0 * sb0 + b1 * sb1 + b2 * sb2 + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k0) & (rn[None, :] < N), other=0.0)
        if HALF:
            acc = tl.dot(a, b, acc)
        else:
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + bid * M * N + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def strided_copy_kernel(src_ptr, dst_ptr, n: tl.constexpr,
                        d1: tl.constexpr, d2: tl.constexpr, d3: tl.constexpr, d4: tl.constexpr,
                        ss0: tl.constexpr, ss1: tl.constexpr, ss2: tl.constexpr, ss3: tl.constexpr, ss4: tl.constexpr,
                        ds0: tl.constexpr, ds1: tl.constexpr, ds2: tl.constexpr, ds3: tl.constexpr, ds4: tl.constexpr,
                        BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, WIDE: tl.constexpr):
    """dst[idx] = src[idx] over a 5-dim index space (d0, d1, ..., d4), both sides by strides: transposes, and the
    slices of cat and stack. Tiles of rows x columns (row_block): the divisions happen once a row. The dims and
    strides are constants (a program's shapes are fixed; another layout compiles another copy): the row divisions
    become multiplies and shifts, a 0 stride (expand) drops out, and known row lengths let a slice's rows store as
    vectors where they are aligned. WIDE: offsets reach 2^31 (int64 index math; also needed where a constant stride
    passes int32)."""
    rows, cols, offs, mask = row_block(n, d4, BLOCK_R, BLOCK_C, WIDE)
    i0, i1, i2, i3 = unravel4(rows, d1, d2, d3)
    src = (i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3)[:, None] + cols[None, :] * ss4
    dst = (i0 * ds0 + i1 * ds1 + i2 * ds2 + i3 * ds3)[:, None] + cols[None, :] * ds4
    x = tl.load(src_ptr + src, mask=mask)
    tl.store(dst_ptr + dst, x, mask=mask)


@triton.jit
def transpose_tile_kernel(x_ptr, out_ptr, A: tl.constexpr, C: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr,
                          sa: tl.constexpr, sc: tl.constexpr, sb0: tl.constexpr, sb1: tl.constexpr, sb2: tl.constexpr,
                          da: tl.constexpr, dc: tl.constexpr, db0: tl.constexpr, db1: tl.constexpr,
                          db2: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_C: tl.constexpr, WIDE: tl.constexpr):
    """out[b, a, c] = x[b, a, c] where x runs on in memory along a (sa = 1) and out along c (dc = 1): a transpose or
    permutation of x into a new contiguous tensor. A program copies one [BLOCK_A, BLOCK_C] tile of one batch index b =
    (b0, b1, b2): it loads the tile along a, coalesced on the source's side, and stores it along c, coalesced on the
    destination's; Triton turns the tile around in shared memory in between. Both unit strides are specialized to 1,
    which tells the compiler each side's contiguous dim. The divisions are per program, not per element, and by
    constants: sizes and strides are constexpr (a program's shapes are fixed; the wrapper passes them by keyword, as a
    fused kernel's signature lists them after its positional arguments), so a tile's row offsets are known multiples
    of the strides and its stores can be proven aligned. WIDE: offsets reach 2^31 (int64 index math; a constant
    stride past int32 would not multiply an int32 index either)."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    tiles_a = tl.cdiv(A, BLOCK_A)
    tiles_c = tl.cdiv(C, BLOCK_C)
    b = pid // (tiles_a * tiles_c)
    t = pid % (tiles_a * tiles_c)
    a = t // tiles_c * BLOCK_A + tl.arange(0, BLOCK_A)
    c = t % tiles_c * BLOCK_C + tl.arange(0, BLOCK_C)
    b2 = b % B2
    b1 = b // B2 % B1
    b0 = b // (B2 * B1)
    mask = (a < A)[:, None] & (c < C)[None, :]
    src = b0 * sb0 + b1 * sb1 + b2 * sb2 + a[:, None] * sa + c[None, :] * sc
    x = tl.load(x_ptr + src, mask=mask)
    dst = b0 * db0 + b1 * db1 + b2 * db2 + a[:, None] * da + c[None, :] * dc  # out's flat index
    tl.store(out_ptr + dst, x.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def triangle_kernel(x_ptr, out_ptr, n: tl.constexpr, H: tl.constexpr, W: tl.constexpr, diagonal: tl.constexpr,
                    UPPER: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """triu/tril over the last two dims of a contiguous tensor (WIDE: n >= 2^31, int64 index math). n, H, W and the
    diagonal are constants (a program's shapes are fixed): the per-element column and row are a multiply and shift,
    not a division by a runtime W, and the mask is uniform over runs of n's power-of-two divisor (vector loads)."""
    offs, mask = flat_block(n, BLOCK, WIDE)
    col = offs % W
    row = (offs // W) % H
    if UPPER:
        keep = col - row >= diagonal
    else:
        keep = col - row <= diagonal
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(keep, x, tl.zeros_like(x)), mask=mask)


@triton.jit
def conv_phase(pid, n_pblocks, qd, qh, qw, g, cg, co, CIN_G, COUT_G, taps, KD, KH, KW, SD, SH, SW, PD, PH, PW,
               RH, RW, TD, TH, TW, ID, IH, IW, TRANSPOSED: tl.constexpr):
    """A conv kernel's setup per program: for the per-dim positions q, the outputs o they stand for and the gather's
    base b; the phase's residues r (0 for a direct conv, which never reads them) and first taps k0; the weight row
    of each output channel and the weight stride of an input channel. The sizes are the calling kernel's constants,
    so its divisions by them are multiplies and shifts."""
    # the input position per dim is b + a: b from the output position, a from the tap, so the gather's offsets
    # and bounds are sums and compares of a [BLOCK_P] and a [BLOCK_K] vector
    if TRANSPOSED:
        phase = pid // n_pblocks
        rw = phase % RW
        rh = (phase // RW) % RH
        rd = phase // (RW * RH)
        od = rd + qd * SD
        oh = rh + qh * SH
        ow = rw + qw * SW
        bd = qd
        bh = qh
        bw = qw
        # first tap reaching the phase per dim: with c = gcd(stride, dil) = stride / T, stride divides
        # r + pad - tap * dil iff c divides r + pad and tap = (r + pad) / c * I mod T, I = (dil / c)^-1 mod T
        kd0 = tl.where((rd + PD) % (SD // TD) == 0, (rd + PD) // (SD // TD) * ID % TD, KD)
        kh0 = tl.where((rh + PH) % (SH // TH) == 0, (rh + PH) // (SH // TH) * IH % TH, KH)
        kw0 = tl.where((rw + PW) % (SW // TW) == 0, (rw + PW) // (SW // TW) * IW % TW, KW)
        w_row = (g * CIN_G * COUT_G + cg) * taps  # weight (C, COUT_G, KD, KH, KW)
        w_cs = COUT_G * taps
    else:
        rd = 0
        rh = 0
        rw = 0
        od = qd
        oh = qh
        ow = qw
        bd = od * SD - PD
        bh = oh * SH - PH
        bw = ow * SW - PW
        kd0 = 0
        kh0 = 0
        kw0 = 0
        w_row = co * CIN_G * taps  # weight (CO, CIN_G, KD, KH, KW)
        w_cs = taps
    return od, oh, ow, bd, bh, bw, rd, rh, rw, kd0, kh0, kw0, w_row, w_cs


@triton.jit
def conv_taps(j, kd0, kh0, kw0, rd, rh, rw, bd, bh, bw, p_ok, D, H, W, KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW,
              JD, JH, JW, TD, TH, TW, TRANSPOSED: tl.constexpr):
    """conv_kernel's taps j (indices among those that reach the phase): the gather's mask over taps x positions
    (the input position per dim is b + a: b from the output position, a from the tap, so its bounds are compares
    of a [BLOCK_P] and a [BLOCK_K] vector), each tap's input and weight offset, and which taps exist."""
    kd = kd0 + j // (JW * JH) * TD
    kh = kh0 + (j // JW) % JH * TH
    kw = kw0 + j % JW * TW
    if TRANSPOSED:  # exact divisions for the taps that exist
        ad = (rd + PD - kd * DD) // SD
        ah = (rh + PH - kh * DH) // SH
        aw = (rw + PW - kw * DW) // SW
    else:
        ad = kd * DD
        ah = kh * DH
        aw = kw * DW
    tap_ok = (j < JD * JH * JW) & (kd < KD) & (kh < KH) & (kw < KW)
    ok = (tap_ok[:, None] & p_ok[None, :] & (bd[None, :] >= -ad[:, None]) & (bd[None, :] < (D - ad)[:, None])
          & (bh[None, :] >= -ah[:, None]) & (bh[None, :] < (H - ah)[:, None])
          & (bw[None, :] >= -aw[:, None]) & (bw[None, :] < (W - aw)[:, None]))
    return ok, (ad * H + ah) * W + aw, (kd * KH + kh) * KW + kw, tap_ok


@triton.jit
def conv_dot(acc, x_tap, w_tap, ok, tap_ok, co_ok, w_row, w_cs, kk, c0, CIN_G, DHW, BLOCK_J: tl.constexpr):
    """One reduction step of conv_kernel: input channels c0.. of a tap block, gathered, times their weights."""
    ci = c0 + kk // BLOCK_J
    ci_ok = ci < CIN_G
    x = tl.load(x_tap + (ci * DHW)[:, None], mask=ok & ci_ok[:, None], other=0.0)
    w = tl.load(w_tap[None, :] + w_row[:, None] + (ci * w_cs)[None, :],
                mask=co_ok[:, None] & (tap_ok & ci_ok)[None, :], other=0.0)
    # always a dot, ieee float32: the broadcast-product alternative compiled wrong (see conv_blocks)
    return acc + tl.dot(w.to(tl.float32), x.to(tl.float32), input_precision="ieee")


@triton.jit
def conv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N: tl.constexpr, C: tl.constexpr, D: tl.constexpr, H: tl.constexpr,
                W: tl.constexpr, CO: tl.constexpr, OD: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
                CIN_G: tl.constexpr, COUT_G: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PD: tl.constexpr, PH: tl.constexpr,
                PW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, QD: tl.constexpr,
                QH: tl.constexpr, QW: tl.constexpr, RD: tl.constexpr, RH: tl.constexpr, RW: tl.constexpr,
                JD: tl.constexpr, JH: tl.constexpr, JW: tl.constexpr, TD: tl.constexpr, TH: tl.constexpr,
                TW: tl.constexpr, ID: tl.constexpr, IH: tl.constexpr, IW: tl.constexpr, TRANSPOSED: tl.constexpr,
                BLOCK_CO: tl.constexpr, BLOCK_CI: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_P: tl.constexpr,
                FLAT: tl.constexpr = False, WIDE: tl.constexpr = True):
    """Direct (transposed) convolution over (N, C, D, H, W); 1-d and 2-d convs come as D = H = 1 with unit
    kernel, stride and dilation there. A program computes a [BLOCK_CO, BLOCK_P] tile (a block of one group's
    output channels x a block of output positions, images included: a large batch of small images makes few
    programs) as an implicit GEMM over the group's input channels x kernel taps, BLOCK_K = BLOCK_CI x BLOCK_J of
    them per step: [BLOCK_CO, BLOCK_K] weights times a gathered [BLOCK_K, BLOCK_P] input tile. Taps are the outer
    loop: their index math runs once per tap block. FLAT: one loop over (tap block, channel block) steps instead,
    so the compiler's software pipeline (cp.async, num_stages) prefetches across taps, not only across the few
    channel steps of one tap (two for 64 channels), at a tap's index math per step. WIDE: int64 index math (the
    tensors may pass 2^31 values); else int32 (every size, and so every constant below, fits it).

    Sizes, strides, paddings, dilations and the phase counts are constants (a program's shapes are fixed; the
    wrapper passes them by keyword): a position's q // QW, q % QW and a tap's j // JW are multiplies and shifts,
    not divisions by runtime values, and the step loop's trip count is known.

    A transposed conv is computed as a gather too: output o takes input (o + pad - tap * dil) / stride when the
    division is exact. Exactness depends on o only modulo the stride, so each program owns the outputs of one
    residue r (phase) per dim, o = r + q * stride (R residues: those below the output size), and enumerates only
    the taps that reach them: the first one, then every T-th (J of them). A direct conv has q = o and all taps
    (R = T = 1, J = K). Written for the interpreter too: no calls of jit functions such as tl.cdiv or tl.min (it
    re-patches triton.language on each) other than its helpers, which keep functions short (inlined)."""
    pid = tl.program_id(0)
    pid1 = tl.program_id(1)
    kk = tl.arange(0, BLOCK_CI * BLOCK_J)
    if WIDE:  # the interpreter checks every int32 add and multiply for overflow, at several numpy operations each
        pid = pid.to(tl.int64)
        pid1 = pid1.to(tl.int64)
        kk = kk.to(tl.int64)
    n_pblocks = (N * QD * QH * QW + BLOCK_P - 1) // BLOCK_P
    q = (pid % n_pblocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    qw = q % QW
    qh = (q // QW) % QH
    qd = (q // (QW * QH)) % QD
    n = q // (QW * QH * QD)
    n_cblocks = (COUT_G + BLOCK_CO - 1) // BLOCK_CO
    g = pid1 // n_cblocks
    cg = (pid1 % n_cblocks) * BLOCK_CO + tl.arange(0, BLOCK_CO)  # channel in group
    co = g * COUT_G + cg
    co_ok = cg < COUT_G
    taps = KD * KH * KW
    od, oh, ow, bd, bh, bw, rd, rh, rw, kd0, kh0, kw0, w_row, w_cs = conv_phase(
        pid, n_pblocks, qd, qh, qw, g, cg, co, CIN_G, COUT_G, taps, KD, KH, KW, SD, SH, SW, PD, PH, PW,
        RH, RW, TD, TH, TW, ID, IH, IW, TRANSPOSED)
    p_ok = (n < N) & (od < OD) & (oh < OH) & (ow < OW)
    p_off = ((n * C + g * CIN_G) * D + bd) * H * W + bh * W + bw
    acc = tl.zeros([BLOCK_CO, BLOCK_P], dtype=tl.float32)
    acc += tl.load(b_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[:, None]
    n_c = (CIN_G + BLOCK_CI - 1) // BLOCK_CI
    for s in range(0, (JD * JH * JW + BLOCK_J - 1) // BLOCK_J * (n_c if FLAT else 1)):
        j0 = s // n_c * BLOCK_J if FLAT else s * BLOCK_J
        ok, x_off, w_off, tap_ok = conv_taps(j0 + kk % BLOCK_J, kd0, kh0, kw0, rd, rh, rw, bd, bh, bw, p_ok, D, H, W,
                                             KD, KH, KW, SD, SH, SW, PD, PH, PW, DD, DH, DW, JD, JH, JW, TD, TH, TW,
                                             TRANSPOSED)
        x_tap = x_ptr + x_off[:, None] + p_off[None, :]
        if FLAT:
            acc = conv_dot(acc, x_tap, w_ptr + w_off, ok, tap_ok, co_ok, w_row, w_cs, kk, s % n_c * BLOCK_CI, CIN_G,
                           D * H * W, BLOCK_J)
        else:
            for c0 in range(0, CIN_G, BLOCK_CI):
                acc = conv_dot(acc, x_tap, w_ptr + w_off, ok, tap_ok, co_ok, w_row, w_cs, kk, c0, CIN_G, D * H * W,
                               BLOCK_J)
    o_off = (n[None, :] * CO + co[:, None]) * (OD * OH * OW) + ((od * OH + oh) * OW + ow)[None, :]
    tl.store(out_ptr + o_off, acc.to(out_ptr.dtype.element_ty), mask=co_ok[:, None] & p_ok[None, :])


@triton.jit
def conv_small_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N: tl.constexpr, C: tl.constexpr, D: tl.constexpr,
                      H: tl.constexpr, W: tl.constexpr, CO: tl.constexpr, OD: tl.constexpr, OH: tl.constexpr,
                      OW: tl.constexpr, CIN_G: tl.constexpr, COUT_G: tl.constexpr, KD: tl.constexpr,
                      KH: tl.constexpr, KW: tl.constexpr, SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                      PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr,
                      DW: tl.constexpr, QD: tl.constexpr, QH: tl.constexpr, QW: tl.constexpr, RD: tl.constexpr,
                      RH: tl.constexpr, RW: tl.constexpr, JD: tl.constexpr, JH: tl.constexpr, JW: tl.constexpr,
                      TD: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr, ID: tl.constexpr, IH: tl.constexpr,
                      IW: tl.constexpr, TRANSPOSED: tl.constexpr, BLOCK_CO: tl.constexpr, BLOCK_P: tl.constexpr):
    """Direct (transposed) convolution over (N, C, D, H, W) for a small reduction: few input channels x taps, such
    as one channel under a 6x6 kernel (36 terms, which tl.dot steps of K = 16 pad to 48). Each (tap, input channel)
    adds an outer product, a column of weights times a row of inputs, to the [BLOCK_CO, BLOCK_P] output tile:
    float32 FMAs, as exact as the reference. A thread holds all BLOCK_CO channels of BLOCK_P / (32 x warps)
    positions, so a narrow, long tile (16 x 512) loads fewest operands per FMA; weights load unmasked.

    Positions are flat over (qd, qh, image, qw), qw fastest: a block's positions mostly share their row (qd, qh),
    and a kernel row of taps (kd, kh) that reaches no input row of the block is skipped (a one-row input under a
    6x6 kernel with padding 3 is read by one kernel row of six). int32 positions (the wrapper's choice: fewer than
    2^31). A transposed conv is a gather too, by phases (conv_phase): output o takes input
    (o + pad - tap * dil) / stride where the division is exact; a phase's taps are every T-th from k0 (J of them).
    Sizes, strides, paddings and dilations are constants (by keyword, as in conv_kernel): the positions' divisions
    are multiplies and shifts, and the tap and channel loops have known trip counts."""
    pid = tl.program_id(0)
    n_pblocks = (N * QD * QH * QW + BLOCK_P - 1) // BLOCK_P
    q = (pid % n_pblocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    qw = q % QW
    n = (q // QW) % N
    qh = (q // (QW * N)) % QH
    qd = q // (QW * N * QH)
    n_cblocks = (COUT_G + BLOCK_CO - 1) // BLOCK_CO
    g = tl.program_id(1) // n_cblocks
    cg = (tl.program_id(1) % n_cblocks) * BLOCK_CO + tl.arange(0, BLOCK_CO)  # channel in group
    co = g * COUT_G + cg
    co_ok = cg < COUT_G
    cw = tl.where(co_ok, cg, COUT_G - 1)  # weights load unmasked: channels past the group's last read its last
    od, oh, ow, bd, bh, bw, rd, rh, rw, kd0, kh0, kw0, w_row, w_cs = conv_phase(
        pid, n_pblocks, qd, qh, qw, g, cw, g * COUT_G + cw, CIN_G, COUT_G, KD * KH * KW, KD, KH, KW, SD, SH, SW,
        PD, PH, PW, RH, RW, TD, TH, TW, ID, IH, IW, TRANSPOSED)
    p_ok = (qd < QD) & (od < OD) & (oh < OH) & (ow < OW)
    x_img = (n.to(tl.int64) * C + g * CIN_G) * D * H * W  # the group's first input channel; int64: x may pass 2^31
    acc = tl.zeros([BLOCK_CO, BLOCK_P], dtype=tl.float32)
    acc += tl.load(b_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[:, None]
    for jd in range(JD):
        for jh in range(JH):
            kd = kd0 + jd * TD
            kh = kh0 + jh * TH
            if TRANSPOSED:  # exact divisions for the taps that exist
                i_d = bd + (rd + PD - kd * DD) // SD
                i_h = bh + (rh + PH - kh * DH) // SH
                row_ok = tl.where((kd < KD) & (kh < KH), p_ok, False)  # not &: int32 in the interpreter
            else:
                i_d = bd + kd * DD
                i_h = bh + kh * DH
                row_ok = p_ok
            row_ok = row_ok & (i_d >= 0) & (i_d < D) & (i_h >= 0) & (i_h < H)
            if tl.max(row_ok.to(tl.int32), axis=0) > 0:  # some position of the block reads this kernel row
                x_row = x_ptr + x_img + (i_d * H + i_h) * W
                w_tap = w_ptr + w_row + (kd * KH + kh) * KW
                for ci in range(CIN_G):
                    for jw in range(JW):
                        kw = kw0 + jw * TW
                        if TRANSPOSED:  # a tap past the kernel: inputs masked, the weight read from the last tap
                            i_w = bw + (rw + PW - kw * DW) // SW
                            ok = tl.where(kw < KW, row_ok, False)
                            kw = tl.where(kw < KW, kw, KW - 1)
                        else:
                            i_w = bw + kw * DW
                            ok = row_ok
                        ok = ok & (i_w >= 0) & (i_w < W)
                        x = tl.load(x_row + ci * D * H * W + i_w, mask=ok, other=0.0).to(tl.float32)
                        w = tl.load(w_tap + ci * w_cs + kw).to(tl.float32)
                        acc += w[:, None] * x[None, :]  # no sum over an axis: that compiled wrong (H100, Triton 3.6)
    o_off = (n[None, :].to(tl.int64) * CO + co[:, None]) * (OD * OH * OW) + ((od * OH + oh) * OW + ow)[None, :]
    tl.store(out_ptr + o_off, acc.to(out_ptr.dtype.element_ty), mask=co_ok[:, None] & p_ok[None, :])


@triton.jit
def pool_taps(acc, x_ptr, row, ow_s, ok, W: tl.constexpr, KW: tl.constexpr, PW: tl.constexpr, IS_MAX: tl.constexpr,
              MASKED: tl.constexpr):
    """acc combined with the KW taps of one window row for pool_rows_kernel's [rows, outputs] tile: the input rows
    start at `row`, tap kw reads positions ow_s + kw - PW (ow_s: the outputs times the stride; the tap's shift a
    constant, so where it is a multiple of 4 the compiler knows the loads 16-byte aligned: vectors). MASKED: a tap's
    positions may leave the row (padding), so each load checks them against W (and `ok`: the rows' and outputs' mask)
    and reads the padding's value outside it; else every position lies inside an input row: plain loads, no mask
    math, predicate or zeroed register per tap and element."""
    for kw in tl.static_range(KW):
        i_w = ow_s + (kw - PW)
        ptrs = x_ptr + row[:, None] + i_w[None, :]
        if MASKED:
            m = ok & ((i_w >= 0) & (i_w < W))[None, :]
            if IS_MAX:
                acc = tl.maximum(acc, tl.load(ptrs, mask=m, other=-float("inf")).to(tl.float32))
            else:
                acc += tl.load(ptrs, mask=m, other=0.0).to(tl.float32)
        elif IS_MAX:
            acc = tl.maximum(acc, tl.load(ptrs).to(tl.float32))
        else:
            acc += tl.load(ptrs).to(tl.float32)
    return acc


@triton.jit
def pool_rows_kernel(x_ptr, out_ptr, n_rows, D: tl.constexpr, H: tl.constexpr, W: tl.constexpr, OD: tl.constexpr,
                     OH: tl.constexpr, OW: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                     SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PD: tl.constexpr, PH: tl.constexpr,
                     PW: tl.constexpr, IS_MAX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
                     WIDE: tl.constexpr = True):
    """Max or average pooling over (N*C, D, H, W). The output is rows (n*c, od, oh) of OW values; a program owns
    BLOCK_R rows x BLOCK_W outputs along W, finds each row's input rows once (a few divisions per row, none per
    output) and, per window row (kd, kh), loads one value per output and tap kw, along W: contiguous for stride 1.
    The KW taps are unrolled. Padding counts in the average, as PyTorch's default count_include_pad=True does (the
    window never leaves the padded input). Sizes, window, stride and padding are constants (a program's shapes are
    fixed; the wrapper passes them by keyword): the row divisions are multiplies and shifts, and each tap's offset
    along W is a constant, so the aligned taps of a stride-1 window load as vectors. WIDE: int64 index math (the
    input or output has 2^31 values or more); else int32, fewer registers and instructions per address."""
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    r = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    ow0 = tl.program_id(1) * BLOCK_W
    ow = ow0 + tl.arange(0, BLOCK_W)
    rc = tl.minimum(r, n_rows - 1)  # rows past the last stand in for it: their loads stay in x
    oh = rc % OH
    od = (rc // OH) % OD
    nc = rc // (OH * OD)
    mask = (r < n_rows)[:, None] & (ow < OW)[None, :]
    # most blocks' windows lie inside the input rows (all but the edge blocks of a long row): their taps load
    # unmasked, a row's validity applied once per window row instead of a mask per tap and element
    inside = (ow0 * SW - PW >= 0) & ((ow0 + BLOCK_W - 1) * SW - PW + KW - 1 < W)
    if IS_MAX:
        empty = tl.zeros([BLOCK_R, BLOCK_W], dtype=tl.float32) - float("inf")
    else:
        empty = tl.zeros([BLOCK_R, BLOCK_W], dtype=tl.float32)
    acc = empty
    for kd in range(KD):
        for kh in range(KH):
            i_d = od * SD - PD + kd
            i_h = oh * SH - PH + kh
            row_ok = (r < n_rows) & (i_d >= 0) & (i_d < D) & (i_h >= 0) & (i_h < H)
            if inside:  # a padding row reads the nearest input row (unmasked), its values dropped after the taps
                row = ((nc * D + tl.minimum(tl.maximum(i_d, 0), D - 1)) * H + tl.minimum(tl.maximum(i_h, 0), H - 1)) * W
                part = pool_taps(empty, x_ptr, row, ow * SW, row_ok, W, KW, PW, IS_MAX, False)
                if IS_MAX:
                    acc = tl.maximum(acc, tl.where(row_ok[:, None], part, -float("inf")))
                else:
                    acc += tl.where(row_ok[:, None], part, 0.0)
            else:
                row = ((nc * D + i_d) * H + i_h) * W  # the input row's first value
                acc = pool_taps(acc, x_ptr, row, ow * SW, row_ok[:, None] & (ow < OW)[None, :], W, KW, PW, IS_MAX,
                                True)
    if not IS_MAX:
        acc = acc / (KD * KH * KW)
    tl.store(out_ptr + r[:, None] * OW + ow[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)
