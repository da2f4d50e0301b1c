"""One Python wrapper per kernel: allocation, views, shape arithmetic and the launch, nothing else
(the verifier's strict policy). Like the kernels, they are copied verbatim into candidates, so
each may use only torch, triton, the kernels and the helpers above it in this file."""
import torch

from drtriton_ray.lower.kernels import (along_dim_kernel, along_loop_kernel, batch_norm_kernel, conv_kernel,
                                        cross_entropy_kernel, cross_entropy_total_kernel,
                                        conv_small_kernel, matmul_kernel, norm_apply_kernel, norm_reduce_kernel,
                                        norm_stats_kernel,
                                        pool_rows_kernel, reduce_kernel, row_norm_kernel,
                                        row_norm_persistent_kernel, softmax_reduce_kernel,
                                        softmax_stats_kernel, strided_copy_kernel, transpose_tile_kernel,
                                        triangle_kernel)


def pad5(shape):
    return (1,) * (5 - len(shape)) + tuple(shape)


def cdiv(n, d):
    """n / d rounded up, as triton.cdiv, whose constexpr wrapper costs microseconds a call."""
    return (n + d - 1) // d


def next_power_of_2(n):
    """The least power of 2 not below n (0 for 0), as triton.next_power_of_2 without its constexpr wrapper."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def extent(t):
    """One past the largest element offset t's view reaches in its storage."""
    if t.is_contiguous() and t.numel():  # what the sum below comes to, without a Python loop a call
        return t.storage_offset() + t.numel()
    return t.storage_offset() + sum((d - 1) * s for d, s in zip(t.shape, t.stride())) + 1


def coalesced_dims(shape, strides):
    """The dims (d1, d2, d3, d4) over which a kernel unravels its flat index (a fused elementwise kernel, a strided
    copy), and each strided tensor's five strides. Adjacent dims merge where every tensor steps through them as
    through one dim (size-1 dims go), as PyTorch's TensorIterator does: each division and modulo left costs more than
    the memory traffic of an element. The outermost merged dim is d0 (its index is a quotient, no modulo), the others
    come last, ones between. The kernels take them as constants (tl.constexpr): divisions by ones vanish, the others
    become multiplies and shifts."""
    dims = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        inner = [s[i] for s in strides]
        if dims and all(outer == step * size for outer, step in zip(dims[-1][1], inner)):
            dims[-1] = (dims[-1][0] * size, inner)
        else:
            dims.append((size, inner))
    first, rest = (dims[0], dims[1:]) if dims else ((1, [0] * len(strides)), [])
    ones = 4 - len(rest)
    sizes = (1,) * ones + tuple(size for size, _ in rest)
    return sizes, [(first[1][k],) + (0,) * ones + tuple(step[k] for _, step in rest) for k in range(len(strides))]


def leaf_wide(meta, *leaves):
    """A fused kernel's launch constants, int64 index math (WIDE) also where a leaf's offsets reach 2^31 (a view into
    a larger tensor): its broadcast strides are constants, and a constant past int32 times an int32 index does not
    compile."""
    return {**meta, "WIDE": meta["WIDE"] or any(extent(t) >= 2**31 for t in leaves)}


def tuned(meta, config, t):
    """Launch constants: the wrapper's own, overridden by a tuned config where kernels run compiled."""
    return {**meta, **config} if config and compiled(t) else meta


def as_columns(n, sizes, strides):
    """The coalesced dims (`coalesced_dims`) for a kernel that walks rows x columns (row_block): where every dim
    merged into d0, d0 becomes the columns, so a tile is one contiguous run rather than a column of single values."""
    if any(d != 1 for d in sizes):
        return sizes, strides
    return (1, 1, 1, n), [(0, 0, 0, 0, s[0]) for s in strides]


def broadcast_strides(t, shape):
    """t's strides broadcast to `shape` (0 along the dims it is broadcast over, a size-1 dim's too, which
    coalesced_dims drops): t.expand(shape).stride() without making a view, a call's cost on CUDA tensors."""
    lead, sizes, strides = len(shape) - t.dim(), t.shape, t.stride()
    return [0 if i < lead or sizes[i - lead] == 1 else strides[i - lead] for i in range(len(shape))]


def leaf_args(shape, dense, *leaves, columns=False):
    """(tensors, index arguments) of a fused kernel's leaves: a dense one (`shape`) is read at the flat index, a
    broadcast one through strides over the coalesced dims (d1..d4, then five strides per broadcast leaf); `columns`:
    for a kernel that walks rows x columns (as_columns)."""
    tensors = [t.contiguous() if d else t for t, d in zip(leaves, dense)]
    if all(dense):
        return tensors, []
    sizes, strides = coalesced_dims(shape, [broadcast_strides(t, shape) for t, d in zip(leaves, dense) if not d])
    if columns:
        sizes, strides = as_columns(torch.Size(shape).numel(), sizes, strides)
    return tensors, [*sizes] + [s for per_leaf in strides for s in per_leaf]


def row_tiles(n, d4, block_c, block=1024):
    """(BLOCK_R, grid) of row_block's tiles of `block` elements, BLOCK_C columns wide, over n values in rows of d4."""
    d4 = max(d4, 1)
    block_r = block // block_c
    return block_r, (cdiv(n // d4, block_r) * cdiv(d4, block_c),)


def flat_args(shape, dtype, *inputs, config=None):
    """(output, grid, arguments, launch constants) of a fused elementwise kernel whose inputs all have the output's
    shape (passed contiguous): flat indices, BLOCK values a program (1024 unless tuned)."""
    out = torch.empty(shape, device=inputs[0].device, dtype=dtype)
    n = out.numel()
    tensors = [t.contiguous() for t in inputs]
    meta = {"BLOCK": 1024, **(config or {}), "WIDE": max(n, *(extent(t) for t in tensors)) >= 2**31}
    return out, (cdiv(n, meta["BLOCK"]),), (out, *tensors, n), meta


def elementwise_args(shape, dtype, dense, *inputs, config=None, columns=1):
    """(output, grid, arguments, launch constants) of a fused elementwise kernel over `inputs` (see leaf_args);
    columns: the innermost coalesced dims its tiles' columns span (fused_kernel_source's). Generated solutions take
    flat_args where every input is dense, which needs none of the broadcast helpers this one carries."""
    out = torch.empty(shape, device=inputs[0].device, dtype=dtype)
    n = out.numel()
    tensors, index = leaf_args(shape, dense, *inputs, columns=True)
    # int64 index math where an index or an input's offset passes int32: the kernel's strides are constants, and a
    # constant past int32 times an int32 index does not compile. A broadcast kernel's tile is 2048 values compiled
    # (16 a thread, which share their rows' and columns' index math), 1024 otherwise, unless tuned.
    block = 2048 if index and compiled(out) else 1024
    meta = {"BLOCK": block, **(config or {}), "WIDE": max(n, *(extent(t) for t in inputs)) >= 2**31}
    if not index:
        return out, (cdiv(n, meta["BLOCK"]),), (out, *tensors, n, *index), meta
    # a broadcast input: tiles of rows x columns, BLOCK in all, the columns along d4 (or d3 x d4); over two dims,
    # 4 rows a tile at least, over which the columns' divisions spread
    block = meta.pop("BLOCK")
    run = index[3] * (index[2] if columns == 2 else 1)
    meta["BLOCK_C"] = min(next_power_of_2(run), block if columns == 1 else max(1, block // 4))
    meta["BLOCK_R"], grid = row_tiles(n, run, meta["BLOCK_C"], block)
    # int64 also where the last tiles' padding takes an index past int32 (tile_block's rows and columns)
    meta["WIDE"] = meta["WIDE"] or grid[0] * meta["BLOCK_R"] * meta["BLOCK_C"] >= 2**31
    return out, grid, (out, *tensors, n, *index), meta


def compiled(t):
    """Whether kernels on t run compiled (CUDA) or in the Triton interpreter (CPU), whose cost is per program
    instance and per loop step whatever the tile: there tiles are as large as numpy handles well."""
    return t.is_cuda


def tile_elements(t):
    """Elements of a kernel's working tile: what registers hold, compiled; interpreted, much more."""
    return 4096 if compiled(t) else 1 << 16


def split_at(shape, dim):
    """(outer, extent, inner) of a contiguous tensor around one dim."""
    dim = dim % len(shape)
    outer = 1
    for d in shape[:dim]:
        outer *= d
    inner = 1
    for d in shape[dim + 1:]:
        inner *= d
    return outer, shape[dim], inner


def reduce_setup(shape, like, dim, keepdim, op, config=None):
    """(out, grid, arguments after the input, launch constants) of reduce_kernel over a `shape` input (device and
    dtype: like's). op: 0 sum, 1 mean, 2 amax, 3 amin, 4 argmax, 5 argmin, 6 var, 7 norm."""
    outer, extent, inner = split_at(shape, dim)
    out_shape = list(shape)
    if keepdim:
        out_shape[dim % len(shape)] = 1
    else:
        del out_shape[dim % len(shape)]
    out = torch.empty(out_shape, device=like.device, dtype=torch.int64 if op in (4, 5) else like.dtype)
    block_r = min(next_power_of_2(extent), tile_elements(like) // 64)
    block_c = min(next_power_of_2(outer * inner), tile_elements(like) // block_r)
    meta = tuned({"BLOCK_R": block_r, "BLOCK_C": block_c}, config, like)
    # the kernel's sizes are constants, passed by keyword (a fused kernel lists constexprs after its other arguments)
    sizes = {"R": extent, "I": inner, "n_cols": outer * inner}
    return out, (cdiv(outer * inner, meta["BLOCK_C"]),), (out,), {**meta, **sizes}


def reduce_dim(x, dim, keepdim, op, config=None):
    out, grid, args, meta = reduce_setup(x.shape, x, dim, keepdim, op, config)
    reduce_kernel[grid](x, *args, OP=op, **meta)
    return out


def long_column(extent, inner=1):
    """Columns too long for one tile: along_loop_kernel. Along a dim other than the last (inner > 1), also columns
    too long for a tile of 32 of them side by side: their rows are 128-byte lines, fully used by one load (a whole
    column's tile of a few columns reads a few bytes per line and costs one memory transaction per row)."""
    side_by_side = min(next_power_of_2(inner), 32) if inner > 1 else 1
    return extent > 4096 or next_power_of_2(extent) * side_by_side > 4096


def short_rows(extent, inner):
    """Whether along_dim_kernel takes a last-dim extent as constant rows (its ROW): rows of up to 16 values, where a
    row's few values cost more in index math, masks and shuffles than in memory traffic."""
    return inner == 1 and extent <= 16


def along_setup(shape, like, dim, config=None, loop=False):
    """(out, grid, arguments after the input, launch constants) of along_dim_kernel (a whole column a tile) or, with
    loop, along_loop_kernel. A config's "ROWS" (compiled or not) says whether a last dim's rows are constant-length
    ones (ROW, short_rows by default); its "WIDE", int64 index math (by default where the input passes 2^31)."""
    outer, extent, inner = split_at(shape, dim)
    out = torch.empty(shape, device=like.device, dtype=like.dtype)
    block_r = next_power_of_2(extent)
    rows = not loop and inner == 1 and (config or {}).get("ROWS", short_rows(extent, inner))
    config = {k: v for k, v in (config or {}).items() if k != "ROWS"} or None
    if loop:
        # compiled, 32 columns side by side at least (long_column); interpreted, as many rows as the tile holds
        block_r = min(block_r, tile_elements(like) // (32 if inner > 1 and compiled(like) else 1))
    # constant rows, compiled: 16 values a thread (4 warps), fewer registers than the 32 of a 4096 tile
    tile = 2048 if rows and compiled(like) else tile_elements(like)
    block_c = max(1, min(next_power_of_2(outer * inner), tile // block_r))
    meta = tuned({"BLOCK_R": block_r, "BLOCK_C": block_c}, config, like)
    if not loop:
        meta["AXIS"] = 1 if inner == 1 else 0  # the last dim: a tile of contiguous rows (along_dim_kernel)
        meta["ROW"] = extent if rows else 0
        meta["WIDE"] = meta.get("WIDE", False) or outer * extent * inner >= 2**31  # a config may only widen
    # the kernel's sizes are constants, passed by keyword (a fused kernel lists constexprs after its other arguments)
    sizes = {"R": extent, "I": inner, "n_cols": outer * inner}
    return out, (cdiv(outer * inner, meta["BLOCK_C"]),), (out,), {**meta, **sizes}


def along_dim(x, dim, op, config=None):
    """op: 0 softmax, 1 log_softmax, 2 cumsum, 3 cummax, 4 cummin (values)."""
    out, grid, args, meta = along_setup(x.shape, x, dim, config)
    along_dim_kernel[grid](x, *args, OP=op, **meta)
    return out


def along_dim_long(x, dim, op, config=None):
    """along_dim for long columns (long_column): along_loop_kernel."""
    out, grid, args, meta = along_setup(x.shape, x, dim, config, True)
    along_loop_kernel[grid](x, *args, OP=op, **meta)
    return out


def softmax_stats_mode(shape, sdim, dim):
    """How softmax_reduce_kernel reads the statistics of a softmax along sdim reduced over dim (its STATS): 2, a value
    per column (the same dim); 1, a value per row, where every other dim after sdim has size 1 (consecutive columns
    step along sdim and share their statistics); 0, a value per element."""
    sdim, dim = sdim % len(shape), dim % len(shape)
    if sdim == dim:
        return 2
    return 1 if all(shape[d] == 1 for d in range(sdim + 1, len(shape)) if d != dim) else 0


def softmax_stats_setup(shape, like, dim, config=None):
    """(statistics, grid, arguments after the input, launch constants) of softmax_stats_kernel along dim of a `shape`
    input (device: like's): two float32 values a column."""
    outer, extent, inner = split_at(shape, dim)
    stats = torch.empty(2 * outer * inner, device=like.device, dtype=torch.float32)
    return (stats,) + softmax_stats_launch(shape, like, stats, dim, config)


def softmax_stats_launch(shape, like, stats, dim, config=None):
    """(grid, arguments after the input, launch constants) of softmax_stats_kernel writing to `stats`."""
    outer, extent, inner = split_at(shape, dim)
    # compiled, 32 columns side by side where they lie side by side in memory (a 128-byte line a row, as
    # along_loop_kernel's); interpreted, as many rows as the tile holds
    block_r = min(next_power_of_2(extent), tile_elements(like) // (32 if inner > 1 and compiled(like) else 1))
    block_c = max(1, min(next_power_of_2(outer * inner), tile_elements(like) // block_r))
    meta = tuned({"BLOCK_R": block_r, "BLOCK_C": block_c}, config, like)
    meta["WIDE"] = meta.get("WIDE", False) or outer * extent * inner >= 2**31  # a config may only widen
    sizes = {"R": extent, "I": inner, "n_cols": outer * inner}
    return (cdiv(outer * inner, meta["BLOCK_C"]),), (stats,), {**meta, **sizes}


def reduced_shape(shape, dim, keepdim):
    out = list(shape)
    if keepdim:
        out[dim % len(shape)] = 1
    else:
        del out[dim % len(shape)]
    return out


def logsumexp(x, dim, keepdim, config=None):
    """torch.logsumexp(x, dim, keepdim) in one pass over x: softmax_stats_kernel's LOG 2, whose statistics are the
    output."""
    out = torch.empty(reduced_shape(x.shape, dim, keepdim), device=x.device, dtype=x.dtype)
    grid, args, meta = softmax_stats_launch(x.shape, x, out, dim, config)
    softmax_stats_kernel[grid](x, *args, LOG=2, **meta)
    return out


def row_strides(t, lead):
    """(group, group stride, row stride) addressing the rows of t, its first `lead` dims (1 or 2) flattened, in
    place: row r at (r // group) * group stride + (r % group) * row stride."""
    return (t.shape[0], 0, t.stride(0)) if lead == 1 else (t.shape[1], t.stride(0), t.stride(1))


def cross_entropy_rows(x, target):
    """(x, target, row addressing) for cross_entropy_kernel: logits of 2 or 3 dims whose classes are contiguous (a
    slice of [batch, seq, V] read in place) and targets of their leading dims' shape, addressed through their
    strides; other logits and targets copied contiguous and flattened first."""
    lead = x.dim() - 1
    if lead not in (1, 2) or x.stride(-1) != 1 or tuple(target.shape) != tuple(x.shape[:-1]):
        x = (x if x.is_contiguous() else contiguous_copy(x)).view(-1, x.shape[-1])
        target = (target if target.is_contiguous() else contiguous_copy(target)).view(-1)
        lead = 1
    xs, ts = row_strides(x, lead), row_strides(target, lead)
    return x, target, (xs[0], xs[1], xs[2], ts[1], ts[2])


def cross_entropy_setup(x, rows, ignore_index, reduction, out_dtype, config=None):
    """(row losses, grid, launch constants) of cross_entropy_kernel over `rows` rows of logits x: float32 losses and
    counts for a mean or a sum (reduction 1, 2), the output itself in out_dtype for none (0)."""
    classes = x.shape[-1]
    size = 2 * rows if reduction else rows
    loss = torch.empty(size, device=x.device, dtype=torch.float32 if reduction else out_dtype)
    block = min(next_power_of_2(classes), tile_elements(x))
    meta = tuned({"BLOCK": block, "num_warps": max(4, min(16, block // 512))}, config, x)
    span = sum((n - 1) * s for n, s in zip(x.shape, x.stride())) + 1  # values from the first row's first to the last's
    meta.update(V=classes, IGNORE=ignore_index, COUNT=bool(reduction), WIDE=max(span, rows * classes) >= 2**31)
    return loss, (rows,), meta


def cross_entropy(x, target, ignore_index, reduction, out_dtype=None, config=None):
    """F.cross_entropy(x, target, ignore_index=ignore_index) of logits x whose dims but the last are the rows (up to
    two, read in place through their strides), reduction 0 none, 1 mean, 2 sum: each row's loss in one pass over
    its logits, then (mean, sum) their total in one program. out_dtype: the result's dtype where it is not x's
    (logits widened to float32 before the loss, read here unwidened: the kernel computes in float32)."""
    out_dtype = out_dtype or x.dtype
    x, target, strides = cross_entropy_rows(x, target)
    rows = target.numel()
    loss, grid, meta = cross_entropy_setup(x, rows, ignore_index, reduction, out_dtype, config)
    cross_entropy_kernel[grid](x, target, loss, *strides, **meta)
    if not reduction:
        return loss
    out = torch.empty((), device=x.device, dtype=out_dtype)
    cross_entropy_total_kernel[(1,)](loss, out, rows, MEAN=reduction == 1, BLOCK=1024)
    return out


def softmax_reduce_setup(shape, like, stats, sdim, dim, keepdim, op, config=None):
    """(out, grid, arguments after the input, launch constants) of softmax_reduce_kernel: the reduction over dim (op as
    reduce_setup's) of a softmax along sdim of a `shape` input, from x and its statistics (softmax_stats_setup's)."""
    sdim, dim = sdim % len(shape), dim % len(shape)
    outer, extent, inner = split_at(shape, dim)
    s_outer, s_extent, s_inner = split_at(shape, sdim)
    out_shape = list(shape)
    if keepdim:
        out_shape[dim] = 1
    else:
        del out_shape[dim]
    out = torch.empty(out_shape, device=like.device, dtype=torch.int64 if op in (4, 5) else like.dtype)
    mode = softmax_stats_mode(shape, sdim, dim)
    seg = s_extent if mode == 1 else outer * inner  # columns a program's block stays within
    block_r = min(next_power_of_2(extent), tile_elements(like) // 64)
    block_c = min(next_power_of_2(seg), tile_elements(like) // block_r)
    meta = tuned({"BLOCK_R": block_r, "BLOCK_C": block_c}, config, like)
    meta["WIDE"] = meta.get("WIDE", False) or outer * extent * inner >= 2**31  # a config may only widen
    # the statistics' stride along the reduced dim: x's, less the softmax's dim where that is inside it
    stride = 0 if mode == 2 else inner if dim > sdim else inner // s_extent
    sizes = {"R": extent, "I": inner, "SEG": seg, "SR": s_extent, "SI": s_inner, "NS": s_outer * s_inner, "RS": stride}
    grid = (outer * inner // seg * cdiv(seg, meta["BLOCK_C"]),)
    return out, grid, (stats, out), {**meta, **sizes}


def softmax_reduce(x, sdim, log, dim, keepdim, op, config=None):
    """A reduction (op as reduce_dim's) over dim of the softmax (log: log-softmax) along sdim of x, its only reader:
    the softmax's statistics in one pass over x, then the reduction recomputing the softmax where it loads x."""
    stats, grid, args, meta = softmax_stats_setup(x.shape, x, sdim)
    softmax_stats_kernel[grid](x, *args, LOG=log, **meta)
    out, grid, args, meta = softmax_reduce_setup(x.shape, x, stats, sdim, dim, keepdim, op, config)
    softmax_reduce_kernel[grid](x, *args, OP=op, LOG=log, STATS=softmax_stats_mode(x.shape, sdim, dim), **meta)
    return out


def norm_eps(like, mode, eps=None):
    """A norm's epsilon: the program's, else PyTorch's default (RMS norm: the dtype's machine epsilon)."""
    if eps is not None:
        return eps
    return torch.finfo(like.dtype).eps if mode == 1 else 1e-5


def row_norm_tile(rows, length, like):
    """row_norm_kernel's default tile for `rows` rows of `length` values: short rows several to a program. Compiled,
    a row of up to 32768 values is one tile, a warp per 1024 values (16 at most: 64 a thread): each of the kernel's
    three passes is one load of the whole row, all in flight at once, not a loop of steps each waiting on its load.
    Longer rows go in tile_elements steps, by 8 warps compiled: the tuning table's fastest on both such rows timed on
    an H200 (4,096 x 131,072 and 4 x 134M values: 10% and 21% under 4 warps, configs/lowering-tuning.json)."""
    block = next_power_of_2(length)
    if compiled(like) and tile_elements(like) < block <= 32768:
        return {"BLOCK_ROWS": 1, "BLOCK": block, "num_warps": min(16, block // 1024)}
    if compiled(like) and block > 32768:
        return {"BLOCK_ROWS": 1, "BLOCK": tile_elements(like), "num_warps": 8}
    block = min(block, tile_elements(like))
    return {"BLOCK_ROWS": max(1, min(next_power_of_2(rows), tile_elements(like) // block)), "BLOCK": block}


def row_norm_setup(shape, like, weight, bias, mode, groups=1, config=None, eps=None, row=None):
    """(out, grid, arguments after the input, launch constants) of row_norm_kernel. mode: 0 layer norm, 1 RMS norm
    (rows of weight's size, or `row` values for a norm without weight), 2 group norm (a row per image and group),
    3 instance norm."""
    numel = 1
    for d in shape:
        numel *= d
    positions, per_group, eps = 1, 1, norm_eps(like, mode, eps)
    if mode >= 2:
        positions = numel // (shape[0] * shape[1])
        per_group = shape[1] // groups if mode == 2 else 1
        groups = groups if mode == 2 else 1
        rows, length = shape[0] * shape[1] // per_group, per_group * positions
    else:
        length = row_length(weight, row)
        rows = numel // length
    out = torch.empty(shape, device=like.device, dtype=like.dtype)
    meta = tuned(row_norm_tile(rows, length, like), config, like)
    meta["WIDE"] = meta.get("WIDE", False) or numel >= 2**31  # a config may only widen
    args = (like if weight is None else weight, like if bias is None else bias, out, eps)
    # the kernel's sizes are constants, passed by keyword (a fused kernel lists constexprs after its other arguments)
    sizes = {"n_rows": rows, "L": length, "S": positions, "CPG": per_group, "G": groups}
    return out, (cdiv(rows, meta["BLOCK_ROWS"]),), args, {**meta, **sizes}


def row_length(weight, row):
    """A layer or RMS norm's row length: its weight's size, or `row` where it has no weight (an RMS norm whose
    weight multiplies after a cast: no weight of ones to allocate and read a call)."""
    return weight.numel() if weight is not None else row


def row_norm(x, weight, bias, mode, groups=1, config=None, eps=None, row=None):
    out, grid, args, meta = row_norm_setup(x.shape, x, weight, bias, mode, groups, config, eps, row)
    row_norm_kernel[grid](x, *args, MODE=mode, HAS_W=weight is not None, HAS_B=bias is not None, **meta)
    return out


def layer_norm(x, weight, bias, config=None, eps=None):
    return row_norm(x, weight, bias, 0, 1, config, eps)


def rms_norm(x, weight, config=None, eps=None, row=None):
    return row_norm(x, weight, None, 1, 1, config, eps, row)


def group_norm(x, groups, weight, bias, config=None, eps=None):
    return row_norm(x, weight, bias, 2, groups, config, eps)


def instance_norm(x, config=None, eps=None):
    return row_norm(x, None, None, 3, 1, config, eps)


def batch_norm_setup(shape, like, weight, bias, config=None, eps=None):
    """(out, grid, arguments after the input, launch constants) of batch_norm_kernel."""
    channels = shape[1]
    positions = 1
    for d in shape[2:]:
        positions *= d
    out = torch.empty(shape, device=like.device, dtype=like.dtype)
    block = min(next_power_of_2(shape[0] * positions), tile_elements(like) // 4)
    block_c = max(1, min(next_power_of_2(channels), tile_elements(like) // 4 // block))
    meta = tuned({"BLOCK_C": block_c, "BLOCK": block}, config, like)
    args = (weight, bias, out, shape[0], channels, positions, norm_eps(like, 4, eps))
    return out, (cdiv(channels, meta["BLOCK_C"]),), args, meta


def batch_norm(x, weight, bias, config=None, eps=None):
    out, grid, args, meta = batch_norm_setup(x.shape, x, weight, bias, config, eps)
    batch_norm_kernel[grid](x, *args, **meta)
    return out


def sm_count(t):
    """Streaming multiprocessors of t's GPU (a nominal H100's 132 off CUDA)."""
    return torch.cuda.get_device_properties(t.device).multi_processor_count if t.is_cuda else 132


def whole_rows(length):
    """Whether a layer or RMS norm's rows of `length` values take row_norm_persistent_kernel: rows that are one tile
    already (past tile_elements' 4096, up to 8192: 16 values a thread at 16 warps, twice for the next block's)."""
    return 4096 < length <= 8192


def row_norm_persistent_setup(shape, like, weight, bias, mode, config=None, eps=None, row=None):
    """(out, grid, arguments after the input, launch constants) of row_norm_persistent_kernel: a layer or RMS norm
    (mode 0, 1) over the last dims (weight's). Compiled, a row a block at 16 warps (16 values a thread, and as many
    for the next row's), 2 programs per SM; interpreted, a program per block of as many rows as tile_elements holds.
    A row a block beat two on an H200 for both layer norms of the level-2 probe (0.88 against 0.92 ms, 0.98 against
    1.18 ms: bench/layout_probe.py's "persistent 1 row w16")."""
    numel = 1
    for d in shape:
        numel *= d
    length = row_length(weight, row)
    rows = numel // length
    block = next_power_of_2(length)
    if compiled(like):
        meta = {"BLOCK_ROWS": 1, "BLOCK": block, "num_warps": 16}
    else:
        meta = {"BLOCK_ROWS": max(1, min(next_power_of_2(rows), tile_elements(like) // block)), "BLOCK": block}
    meta = tuned(meta, config, like)
    blocks = cdiv(rows, meta["BLOCK_ROWS"])
    grid = (min(blocks, 2 * sm_count(like)) if compiled(like) else blocks,)
    # the last prefetch reaches a grid's rows past n_rows (masked, but its offsets are computed)
    meta["WIDE"] = meta.get("WIDE", False) or (rows + grid[0] * meta["BLOCK_ROWS"]) * length >= 2**31
    out = torch.empty(shape, device=like.device, dtype=like.dtype)
    args = (like if weight is None else weight, like if bias is None else bias, out, norm_eps(like, mode, eps))
    # the kernel's sizes are constants, passed by keyword (a fused kernel lists constexprs after its other arguments)
    return out, grid, args, {**meta, "n_rows": rows, "L": length}


def row_norm_persistent(x, weight, bias, mode, config=None, eps=None, row=None):
    """A layer or RMS norm over rows of 4097 to 8192 values (whole_rows): persistent programs, x read once."""
    out, grid, args, meta = row_norm_persistent_setup(x.shape, x, weight, bias, mode, config, eps, row)
    row_norm_persistent_kernel[grid](x, *args, MODE=mode, HAS_W=weight is not None, HAS_B=bias is not None, **meta)
    return out


def few_long_rows(rows, length):
    """Whether a norm's rows (channels for batch norm) are too few and long for a program each (row_norm_kernel,
    batch_norm_kernel): under two per SM of a 132-SM GPU, most SMs idle while each program streams its row three
    times. split_norm spreads each row over many programs instead. Decided when lowering, from the shape."""
    return rows < 2 * 132 and length >= 16384


def norm_layout(shape, weight, mode, groups, row=None):
    """(rows, segments per row, values per segment, segment stride, row stride) of a norm over a contiguous
    `shape`, mode as split_norm_setup's. A row is segments of contiguous values: one for layer, RMS and instance norm,
    one per channel of the group for group norm, one per image for batch norm (a row per channel)."""
    numel = 1
    for d in shape:
        numel *= d
    if mode <= 1:
        length = row_length(weight, row)
        return numel // length, 1, length, length, length
    positions = numel // (shape[0] * shape[1])
    if mode == 4:
        return shape[1], shape[0], positions, shape[1] * positions, positions
    per_group = shape[1] // groups if mode == 2 else 1
    return numel // (per_group * positions), per_group, positions, positions, per_group * positions


def split_norm_setup(shape, like, weight, bias, mode, groups=1, config=None, eps=None, row=None):
    """(out, grid, norm_stats_kernel's arguments after the input, norm_apply_kernel's, launch constants of both) of a
    norm over few long rows: grid (rows, splits), each program a share of a row's tiles of BLOCK_N segments x BLOCK
    values (short segments share a tile, long ones load contiguously). mode: 0 layer norm, 1 RMS norm, 2 group norm,
    3 instance norm, 4 batch norm (training mode)."""
    rows, segs, seg, seg_stride, row_stride = norm_layout(shape, weight, mode, groups, row)
    eps = norm_eps(like, mode, eps)
    out = torch.empty(shape, device=like.device, dtype=like.dtype)
    tile = 2048 if compiled(like) else 4096
    block = min(next_power_of_2(seg), tile)
    meta = tuned({"BLOCK_N": max(1, min(next_power_of_2(segs), tile // block)), "BLOCK": block}, config, like)
    tiles = cdiv(segs, meta["BLOCK_N"]) * cdiv(seg, meta["BLOCK"])
    # compiled, up to 8 programs per SM, 4 tiles each at least. A program streams its share no faster than its own
    # loads in flight allow, so a grid just past a wave (544 programs where 528 fit at once) ends in a second wave of
    # a few programs that take as long as the first, most SMs idle. 8 an SM is one wave of both kernels at 4 warps and
    # up to 64 registers (the statistics kernel's shifted sums take 56 on sm_90, the normalisation 32-38), 32 warps
    # and 64 KB of loads in flight an SM, and whole waves where 4 or 2 fit; the splits a row are rounded down so as not
    # to pass it. Interpreted (its cost is per program and step), 8, which still splits a row
    programs = 8 * sm_count(like) if compiled(like) else 8
    split_tiles = max(cdiv(tiles, max(1, programs // rows)), 4 if compiled(like) else 1)
    splits = cdiv(tiles, split_tiles)
    meta = {**meta, "BLOCK_SPLITS": next_power_of_2(splits)}
    part = torch.empty(rows * meta["BLOCK_SPLITS"] * 3, device=like.device, dtype=torch.float32)
    # the geometry is both kernels' constants, passed by keyword (a fused kernel lists constexprs after its other
    # arguments): a tile's divisions become multiplies and shifts
    geometry = {"SEGS": segs, "SEG": seg, "SEG_STRIDE": seg_stride, "ROW_STRIDE": row_stride, "TILES": tiles,
                "SPLIT_TILES": split_tiles}
    args = (part, like if weight is None else weight, like if bias is None else bias, out, groups, eps)
    return out, (rows, splits), (part,), args, {**meta, **geometry}


def norm_reduce_rows(length):
    """Whether norm_reduce_kernel takes rows of `length` values: one tile a row, 16 values a thread at most."""
    return length <= 8192


def norm_reduce_setup(shape, like, weight, bias, mode, dim, config=None, eps=None, row=None):
    """(partial results, grid, arguments after the input, launch constants) of norm_reduce_kernel: a layer or RMS
    norm (mode 0, 1) over the last dims (weight's) of a `shape` input, to be reduced over dim, an outer dim. The
    splits of each (o, m) make about two programs per SM (sm_count), four rows a split at least."""
    dim = dim % len(shape)
    length = row_length(weight, row)
    outer, extent, inner = split_at(shape, dim)
    groups = outer * (inner // length)
    split = max(1, min(cdiv(extent, 4), cdiv(2 * sm_count(like), groups)))
    part = torch.empty((split, groups * length), device=like.device, dtype=torch.float32)
    block = next_power_of_2(length)
    meta = tuned({"BLOCK": block, "num_warps": max(4, min(16, block // 512))}, config, like)
    eps = norm_eps(like, mode, eps)
    sizes = {"O": outer, "R": extent, "M": inner // length, "L": length, "SPLIT": split}
    meta["WIDE"] = outer * extent * inner >= 2**31
    args = (like if weight is None else weight, like if bias is None else bias, part, eps)
    return part, (groups * split,), args, {**meta, **sizes}


def norm_reduce_finish(part, shape, like, dim, keepdim, op):
    """The reduction's output from norm_reduce_kernel's partial results: the splits combined (reduce_kernel), or
    the one split's results as they are."""
    out_shape = list(shape)
    if keepdim:
        out_shape[dim % len(shape)] = 1
    else:
        del out_shape[dim % len(shape)]
    if part.shape[0] > 1:
        part = reduce_dim(part, 0, False, 0 if op == 1 else op)  # a mean's shares add up
    out = part.view(out_shape)
    if out.dtype != like.dtype:  # float32 partials: a Triton copy rounds them to the program's dtype
        cast = torch.empty(out_shape, device=like.device, dtype=like.dtype)
        copy_into(out, cast)
        out = cast
    return out


def norm_reduce(x, weight, bias, mode, dim, keepdim, op, config=None, eps=None, row=None):
    """A layer or RMS norm whose only reader reduces it over an outer dim, in one pass over x."""
    part, grid, args, meta = norm_reduce_setup(x.shape, x, weight, bias, mode, dim, config, eps, row)
    norm_reduce_kernel[grid](x, *args, MODE=mode, OP=op, HAS_W=weight is not None, HAS_B=bias is not None, **meta)
    return norm_reduce_finish(part, x.shape, x, dim, keepdim, op)


def split_norm(x, weight, bias, mode, groups=1, config=None, eps=None, row=None):
    """A norm over rows too few and long for a program each, in two kernels over (row, split) programs: partial
    statistics, then the row's merged statistics applied."""
    out, grid, stats_args, args, meta = split_norm_setup(x.shape, x, weight, bias, mode, groups, config, eps, row)
    norm_stats_kernel[grid](x, *stats_args, MODE=mode, **meta)
    norm_apply_kernel[grid](x, *args, MODE=mode, HAS_W=weight is not None, HAS_B=bias is not None, **meta)
    return out


def matmul_args(a, b, bias, out, batch, m, n, k, a_strides, b_strides, config=None):
    """(grid, arguments after A, launch constants) of matmul_kernel writing `out`; a_strides/b_strides: (batch0,
    batch1, batch2, rows, cols) of A (M x K) and B (K x N)."""
    batch = pad5(batch)[2:]
    # compiled, 64-wide output tiles where the matrix has room (32 otherwise) and 32-deep steps: a 32 x 32 tile
    # re-reads its operands twice as often (with it, linear ran at 0.15x eager on the H100); 16-bit operands on
    # tensor cores take 128 x 128 x 64 tiles at 8 warps where both sides have room (Triton's tutorial's tile); the
    # interpreter, paying per program and per step, takes whole small matrices and up to 128 x 128 x 128 (and
    # widens bfloat16: its dot reads bfloat16 operands as garbage)
    half = a.dtype == b.dtype and a.dtype in ((torch.float16, torch.bfloat16) if compiled(a) else (torch.float16,))
    meta = {"GROUP_M": 8, "HALF": half}
    if compiled(a) and half and m >= 128 and n >= 128:
        meta.update(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    elif compiled(a):
        meta.update(BM=64 if m >= 64 else 32, BN=64 if n >= 64 else 32, BK=32)
    else:
        meta.update(zip(("BM", "BN", "BK"), (min(next_power_of_2(d), 128) for d in (m, n, k))))
    meta = tuned(meta, config, a)
    grid = (cdiv(m, meta["BM"]) * cdiv(n, meta["BN"]) * batch[0] * batch[1] * batch[2],)
    args = (b, out, a if bias is None else bias, m, n, k, batch[1], batch[2], *a_strides, *b_strides)
    return grid, args, meta


def matmul_setup(a, b, config=None, like=None):
    """(out, grid, arguments after A, launch constants) for torch.matmul of operands of rank >= 2: batch dims
    broadcast. Trailing batch dims over which B is the same matrix and A's rows run on in memory become rows of one
    taller product, as in PyTorch: (2511, 2, 594) @ (594, 2880) is one (5022 x 594) @ (594 x 2880), not 2511
    products whose 2 rows fill 2 of each tile's 64."""
    batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    sa, sb = a.expand(batch + (m, k)).stride(), b.expand(batch + (k, n)).stride()
    rows, kept = m, len(batch)
    while kept and (batch[kept - 1] == 1 or (sb[kept - 1] == 0 and sa[kept - 1] == sa[-2] * rows)):
        rows, kept = rows * batch[kept - 1], kept - 1
    pad = (0,) * (3 - kept)
    out = torch.empty(batch + (m, n), device=a.device, dtype=(a if like is None else like).dtype)
    grid, args, meta = matmul_args(a, b, None, out, batch[:kept], rows, n, k, pad + sa[:kept] + sa[-2:],
                                   pad + sb[:kept] + sb[-2:], config)
    return out, grid, args, meta


def matmul(a, b, config=None):
    out, grid, args, meta = matmul_setup(a, b, config)
    matmul_kernel[grid](a, *args, HAS_BIAS=False, **meta)
    return out


def linear_setup(x, weight, bias, config=None, like=None):
    """(out, grid, arguments after x, launch constants) for F.linear: x's rows times weight transposed, plus bias;
    `like`: the tensor whose dtype out takes (a fused epilogue that converts), else x."""
    k = x.shape[-1]
    n = weight.shape[0]
    out = torch.empty(tuple(x.shape[:-1]) + (n,), device=x.device, dtype=(x if like is None else like).dtype)
    if not x.is_contiguous() and 2 <= x.dim() <= 5:  # a slice of rows (a view): its leading dims as batches
        batch, pad = tuple(x.shape[:-2]), (0,) * (5 - x.dim())
        grid, args, meta = matmul_args(x, weight, bias, out, batch, x.shape[-2], n, k, pad + tuple(x.stride()),
                                       (0, 0, 0, weight.stride(1), weight.stride(0)), config)
        return out, grid, args, meta
    grid, args, meta = matmul_args(x, weight, bias, out, (), x.numel() // k, n, k, (0, 0, 0, k, 1),
                                   (0, 0, 0, weight.stride(1), weight.stride(0)), config)
    return out, grid, args, meta


def linear(x, weight, bias, config=None):
    out, grid, args, meta = linear_setup(x, weight, bias, config)
    matmul_kernel[grid](x, *args, HAS_BIAS=bias is not None, **meta)
    return out


def copy_setup(src, dst):
    """(grid, arguments after src, launch constants) of strided_copy_kernel copying src into dst (same shape)."""
    n = src.numel()
    sizes, (ss, ds) = as_columns(n, *coalesced_dims(src.shape, [src.stride(), dst.stride()]))
    # a transpose reads or writes across its rows: square-ish 32-wide tiles keep both sides' cache lines in use
    block_c = min(next_power_of_2(sizes[3]), 1024 if ss[4] == 1 and ds[4] == 1 else 32)
    block_r, grid = row_tiles(n, sizes[3], block_c)
    meta = {"BLOCK_R": block_r, "BLOCK_C": block_c, "WIDE": max(n, extent(src), extent(dst)) >= 2**31}
    return grid, (dst, n, *sizes, *ss, *ds), meta


def copy_into(src, dst):
    if src.numel() == 0:
        return
    grid, args, meta = copy_setup(src, dst)
    strided_copy_kernel[grid](src, *args, **meta)


def permute_setup(x, dims, config=None):
    """(out, grid, arguments after x, launch constants: tiles, sizes and strides) of transpose_tile_kernel copying
    x.permute(dims), x contiguous, into a new contiguous tensor. Over the copy's coalesced dims (d0, ..., d4), the
    tile's c is d4 (out's unit stride) and its a the dim along which x runs on (x's unit stride), or d3 where that is
    d4 too (whole runs, a block of them a tile); the other three are the batch. Transposed tiles are square-ish,
    64 x 64 compiled (a 256-byte run of each side per row), as long as the interpreter likes (it pays per
    program)."""
    view = x.permute(dims)
    out = torch.empty(view.shape, device=x.device, dtype=x.dtype)
    n = out.numel()
    sizes, (ss, ds) = as_columns(n, *coalesced_dims(view.shape, [view.stride(), out.stride()]))
    full = (n // max(1, sizes[0] * sizes[1] * sizes[2] * sizes[3]),) + tuple(sizes)
    a = next((k for k in range(4) if ss[k] == 1 and full[k] > 1), 3)
    b = [k for k in range(4) if k != a]
    tile = tile_elements(x)
    block_c = min(next_power_of_2(full[4]), tile if ss[4] == 1 else (64 if compiled(x) else 256))
    block_a = max(1, min(next_power_of_2(full[a]), tile // block_c))
    block_c = max(1, min(next_power_of_2(full[4]), tile // block_a))  # a short a leaves room for a wider c
    meta = tuned({"BLOCK_A": block_a, "BLOCK_C": block_c, "WIDE": n >= 2**31}, config, x)
    grid = (full[b[0]] * full[b[1]] * full[b[2]] * cdiv(full[a], meta["BLOCK_A"])
            * cdiv(full[4], meta["BLOCK_C"]),)
    # sizes and strides by keyword: the kernel's constants, listed after a fused kernel's positional arguments
    sizes = {"A": full[a], "C": full[4], "B1": full[b[1]], "B2": full[b[2]], "sa": ss[a], "sc": ss[4], "da": ds[a],
             "dc": ds[4]}
    sizes |= {f"sb{j}": ss[k] for j, k in enumerate(b)} | {f"db{j}": ds[k] for j, k in enumerate(b)}
    return out, grid, (out,), {**meta, **sizes}


def permute_copy(x, dims, config=None):
    """x.permute(dims) copied into a new contiguous tensor by transpose_tile_kernel."""
    out, grid, args, meta = permute_setup(x, dims, config)
    transpose_tile_kernel[grid](x, *args, **meta)
    return out


def swapped(ndim, dim0, dim1):
    """The permutation of transpose(dim0, dim1) over ndim dims."""
    dims = list(range(ndim))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return tuple(dims)


def transpose(x, dim0, dim1):
    return permute_copy(x, swapped(x.dim(), dim0, dim1))


def cat(a, b, dim):
    shape = list(a.shape)
    shape[dim] = a.shape[dim] + b.shape[dim]
    out = torch.empty(shape, device=a.device, dtype=a.dtype)
    copy_into(a, out.narrow(dim, 0, a.shape[dim]))
    copy_into(b, out.narrow(dim, a.shape[dim], b.shape[dim]))
    return out


def stack(a, b, dim):
    shape = list(a.shape)
    shape.insert(dim % (a.dim() + 1), 2)
    out = torch.empty(shape, device=a.device, dtype=a.dtype)
    copy_into(a, out.select(dim, 0))
    copy_into(b, out.select(dim, 1))
    return out


def triangle_setup(x, diagonal, upper):
    """(out, grid, arguments after x, launch constants) of triangle_kernel (triu, or tril where not upper)."""
    out = torch.empty_like(x)
    n = x.numel()
    meta = {"UPPER": upper, "BLOCK": 1024, "WIDE": n >= 2**31}
    return out, (cdiv(n, 1024),), (out, n, x.shape[-2], x.shape[-1], diagonal), meta


def triangle(x, diagonal, upper):
    out, grid, args, meta = triangle_setup(x, diagonal, upper)
    triangle_kernel[grid](x, *args, **meta)
    return out


def spatial3(values, n, fill):
    """Per-dim conv/pool settings for n spatial dims, padded to three (fill on the missing ones)."""
    return (fill,) * (3 - n) + tuple(values)


def conv_blocks(cout_g, cin_g, taps, positions, compiled):
    """(BLOCK_CO, BLOCK_CI, BLOCK_J, BLOCK_P) for conv_kernel: output channels, input channels x taps per
    reduction step, output positions. The step is always a tl.dot (ieee float32). Compiled, tiles fit registers
    and pad to tl.dot's minimum of 16 (masked channels and taps) where a conv has fewer: the small-channel
    alternative, a broadcast product summed over the reduction axis, compiled wrong on an H100 (Triton 3.6): wrong
    sums for 1-4 terms, TF32-sized errors for 8 (a 1 -> 32 channel ConvTranspose1d was off on 98% of its outputs;
    docs/lowering.md). Interpreted, gathers of up to 2^17 elements (tl.dot takes any shape there)."""
    if compiled:
        block_co = max(16, min(next_power_of_2(cout_g), 64))
        block_ci = min(next_power_of_2(cin_g), 32)
        block_j = max(1, 16 // block_ci)
        block_p = 64
    else:
        block_co = min(next_power_of_2(cout_g), 128)
        block_j = min(next_power_of_2(taps), 512)
        block_ci = max(1, min(next_power_of_2(cin_g), 512 // block_j))
        block_p = 2 ** 17 // (block_ci * block_j)
    return block_co, block_ci, block_j, max(16, min(block_p, next_power_of_2(positions)))


def conv_args(x, weight, bias, out, stride, padding, dilation, groups, transposed):
    """(tensors after x, sizes, the taps per phase J, positions per phase q, phases) of conv_kernel and
    conv_small_kernel for Conv{1,2,3}d and their transposes (output_padding only shows in the output's shape). The
    sizes are the kernels' constants by name (N, C, D, H, W, CO, OD.., KD.., strides SD.., paddings PD..,
    dilations DD.., positions QD.., residues RD.., taps JD.., tap steps TD.. and inverses ID..), passed by keyword:
    a fused kernel's signature lists constexprs after its positional arguments."""
    n = x.dim() - 2
    d, h, w = spatial3(x.shape[2:], n, 1)
    outs = spatial3(out.shape[2:], n, 1)
    k = spatial3(weight.shape[2:], n, 1)
    s = spatial3((stride,) * n, n, 1)
    dil = spatial3((dilation,) * n, n, 1)
    if transposed:
        # outputs in one phase (residue mod stride; those below the output size) share their taps; taps `step`
        # apart reach the same phase, step = stride / gcd(stride, dilation); the kernel finds the first one with
        # the inverse of dilation / gcd mod step
        steps = tuple(next(t for t in range(1, si + 1) if t * di % si == 0) for si, di in zip(s, dil))
        inverses = tuple(pow(di * st // si, -1, st) for si, di, st in zip(s, dil, steps))
        q = tuple(cdiv(o, si) for o, si in zip(outs, s))
        residues = tuple(min(si, o) for si, o in zip(s, outs))
    else:
        steps, inverses, q, residues = (1, 1, 1), (0, 0, 0), outs, (1, 1, 1)
    taps = tuple(cdiv(ki, st) for ki, st in zip(k, steps))
    sizes = {"N": x.shape[0], "C": x.shape[1], "CO": out.shape[1], "CIN_G": x.shape[1] // groups,
             "COUT_G": out.shape[1] // groups}
    per_dim = {"": (d, h, w), "O": outs, "K": k, "S": s, "P": spatial3((padding,) * n, n, 0), "D": dil, "Q": q,
               "R": residues, "J": taps, "T": steps, "I": inverses}
    for prefix, values in per_dim.items():  # D, H, W; OD, OH, OW; ...; ID, IH, IW
        sizes |= {prefix + dim: v for dim, v in zip("DHW", values)}
    return (weight, bias, out), sizes, taps, q, residues[0] * residues[1] * residues[2]


def conv_setup(x, weight, bias, out_shape, stride, padding, dilation, groups, transposed, config=None):
    """(out, grid, tensors after x, launch constants: the tiles and the sizes) of conv_kernel (conv_args)."""
    out = torch.empty(out_shape, device=x.device, dtype=x.dtype)
    tensors, sizes, taps, q, phases = conv_args(x, weight, bias, out, stride, padding, dilation, groups, transposed)
    cin_g, cout_g = x.shape[1] // groups, out_shape[1] // groups
    positions = x.shape[0] * q[0] * q[1] * q[2]
    block_co, block_ci, block_j, block_p = conv_blocks(cout_g, cin_g, taps[0] * taps[1] * taps[2], positions,
                                                      compiled(x))
    meta = tuned({"BLOCK_CO": block_co, "BLOCK_CI": block_ci, "BLOCK_J": block_j, "BLOCK_P": block_p}, config, x)
    # compiled, one pipelined loop over (tap block, channel block) steps (conv_kernel's FLAT; a config's "FLAT" says,
    # interpreted too); interpreted, taps outside channels (the tap math once per tap block)
    meta["FLAT"] = (config or {}).get("FLAT", compiled(x))
    # int32 index math compiled where each tensor holds under 2^29 values: a read or written lane's offsets stay
    # below its tensor's size (a masked lane's may wrap, never used, its masks from small indices), and so does
    # every constant the kernel multiplies an index by (one past int32 times an int32 index does not compile);
    # interpreted, int64 (its int32 overflow checks cost more); a config may only widen
    wide = not compiled(x) or max(x.numel(), out.numel(), weight.numel()) >= 2**29
    meta["WIDE"] = meta.get("WIDE", False) or wide
    grid = (phases * cdiv(positions, meta["BLOCK_P"]), groups * cdiv(cout_g, meta["BLOCK_CO"]))
    return out, grid, tensors, {**meta, **sizes}


def conv(x, weight, bias, out_shape, stride, padding, dilation, groups, transposed, config=None):
    out, grid, args, meta = conv_setup(x, weight, bias, out_shape, stride, padding, dilation, groups, transposed,
                                       config)
    conv_kernel[grid](x, *args, TRANSPOSED=transposed, **meta)
    return out


def small_reduction(cin_g, taps, positions):
    """Whether a conv (cin_g input channels a group, `taps` kernel taps a phase, output positions a phase and output
    channel) takes conv_small_kernel: a sum of few terms, whose tl.dot steps (16 channels x taps) would be padded
    or gather few channels a tap; int32 positions."""
    return cin_g < 16 and cin_g * taps <= 256 and positions < 2**31


def conv_small_blocks(cout_g, positions, compiled):
    """(BLOCK_CO, BLOCK_P) for conv_small_kernel: output channels x positions. Compiled, a thread holds every channel
    of BLOCK_P / 64 positions (2 warps, conv_small_setup), BLOCK_CO + BLOCK_P / 64 loads for their product's FMAs:
    16 x 256 (64 accumulators a thread), fewer channels for longer blocks; on an H200 the fastest of five tiles on
    the probe's one- to eight-channel convs (bench/conv_probe.py). Interpreted, 2^16."""
    block_co = min(next_power_of_2(cout_g), 16 if compiled else 128)
    block_p = min((4096 if compiled else 1 << 16) // block_co, 1024 if compiled else 1 << 16)
    return block_co, max(32, min(block_p, next_power_of_2(positions)))


def conv_small_setup(x, weight, bias, out_shape, stride, padding, dilation, groups, transposed, config=None):
    """(out, grid, tensors after x, launch constants: the tiles and the sizes) of conv_small_kernel (conv_args): grid
    (phases x position blocks, output channel blocks)."""
    out = torch.empty(out_shape, device=x.device, dtype=x.dtype)
    tensors, sizes, taps, q, phases = conv_args(x, weight, bias, out, stride, padding, dilation, groups, transposed)
    cout_g, positions = out_shape[1] // groups, x.shape[0] * q[0] * q[1] * q[2]
    block_co, block_p = conv_small_blocks(cout_g, positions, compiled(x))
    warps = {"num_warps": 2} if compiled(x) else {}
    meta = tuned({"BLOCK_CO": block_co, "BLOCK_P": block_p, **warps}, config, x)
    grid = (phases * cdiv(positions, meta["BLOCK_P"]), groups * cdiv(cout_g, meta["BLOCK_CO"]))
    return out, grid, tensors, {**meta, **sizes}


def conv_small(x, weight, bias, out_shape, stride, padding, dilation, groups, transposed, config=None):
    out, grid, args, meta = conv_small_setup(x, weight, bias, out_shape, stride, padding, dilation, groups,
                                             transposed, config)
    conv_small_kernel[grid](x, *args, TRANSPOSED=transposed, **meta)
    return out


def pool_setup(x, out_shape, kernel, stride, padding, config=None):
    """(out, grid, arguments after x, launch constants) of pool_rows_kernel: grid (row blocks, blocks along W) over
    the output's rows (n*c, od, oh), BLOCK_W outputs along W (up to 128 compiled) and as many rows as fill the tile
    (short rows share a program). The sizes, window, stride and padding are the kernel's constants, passed by keyword
    (in the launch constants) as a fused kernel's signature lists them after its positional arguments."""
    n = x.dim() - 2
    out = torch.empty(out_shape, device=x.device, dtype=x.dtype)
    d, h, w = spatial3(x.shape[2:], n, 1)
    od, oh, ow = spatial3(out_shape[2:], n, 1)
    rows = out.numel() // ow
    # compiled, 1024 outputs a program (each of them KD x KH x KW loads); interpreted, tiles as large as numpy likes
    tile = 1024 if compiled(x) else 1 << 14
    block_w = min(next_power_of_2(ow), 128 if compiled(x) else tile)
    block_r = max(1, min(tile // block_w, next_power_of_2(rows)))
    meta = tuned({"BLOCK_R": block_r, "BLOCK_W": block_w}, config, x)
    kd, kh, kw = spatial3((kernel,) * n, n, 1)
    sd, sh, sw = spatial3((stride,) * n, n, 1)
    pd, ph, pw = spatial3((padding,) * n, n, 0)
    sizes = {"D": d, "H": h, "W": w, "OD": od, "OH": oh, "OW": ow, "KD": kd, "KH": kh, "KW": kw}
    sizes |= {"SD": sd, "SH": sh, "SW": sw, "PD": pd, "PH": ph, "PW": pw}
    # int32 index math below 2^31 values (a masked lane's offsets may wrap, never used)
    sizes["WIDE"] = max(x.numel(), out.numel()) >= 2**31
    grid = (cdiv(rows, meta["BLOCK_R"]), cdiv(ow, meta["BLOCK_W"]))
    return out, grid, (out, rows), {**meta, **sizes}


def pool(x, out_shape, kernel, stride, padding, is_max, config=None):
    out, grid, args, meta = pool_setup(x, out_shape, kernel, stride, padding, config)
    pool_rows_kernel[grid](x, *args, IS_MAX=is_max, **meta)
    return out


def contiguous_copy(src):
    """A contiguous copy of a strided view (a slice, a broadcast) by the strided-copy kernel."""
    out = torch.empty(src.shape, device=src.device, dtype=src.dtype)
    copy_into(src, out)
    return out


def reshape_view(x, shape):
    """view/reshape/(un)squeeze/flatten: a view of a contiguous tensor, no kernel; a strided one (a slice that PyTorch
    made before this fragment, in an assembled answer) is copied first, as reshape does."""
    return (x if x.is_contiguous() else contiguous_copy(x)).view(shape)


def expand_copy(x, shape):
    return contiguous_copy(x.expand(shape))


def narrow_copy(x, dim, start, length):
    return contiguous_copy(x.narrow(dim, start, length))


def select_copy(x, dim, index):
    return contiguous_copy(x.select(dim, index))
