"""Bitwise-deterministic data-parallel training for PyTorch, at any rank count.

DeterministicDDP replaces DistributedDataParallel's float all-reduce with det's
deterministic mode (docs/determinism.md, docs/pytorch-data-and-determinism.md): each
global batch is trained as the same fixed micro-batches of micro_batch_size samples
whatever the rank count (rank r of W trains the micro-batches of its contiguous slice);
each micro-batch's gradient and loss are scaled by 2^32, rounded to integers and summed
exactly, locally and across ranks with one all_reduce (the integers are carried in float64:
every partial sum stays within 2^53, where float64 addition is exact, so neither the order
nor the grouping of the sum matters and the result is the int64 sum, bit for bit; an int64
buffer would add two conversions per step), then divided once. Together with
pin_determinism() (deterministic kernels, a fixed intra-op thread count) the training is
bitwise identical on 1, 2, 4, ... ranks and across checkpoint, resize and resume.
"""

import ctypes
import os

import torch
import torch.distributed as dist

from .elastic_order import mix64

# 2^32: resolution 2.3e-10 per micro-batch value, as the C++ harness's deterministic mode.
FIXED_POINT_SCALE = 4294967296.0
# Fixed-point values are integers below 2^53 at every stage, so float64 holds them exactly.
_EXACT_BITS = 53
_MAX_MICRO_BATCHES = 1024


def fixed_point_bound(micro_batches):
    """The clamp (in fixed units) of each micro-batch value when a global batch has
    `micro_batches` micro-batches: the largest power of two B with B * micro_batches <=
    2^53, so that every partial sum is an exact integer in float64 and in int64. It depends
    on the global batch and micro-batch sizes only, never on the rank count. In gradient
    units: 2^21 / micro_batches rounded down to a power of two (2,048 for 1,024
    micro-batches, 131,072 for 16)."""
    return float(2 ** (_EXACT_BITS - (micro_batches - 1).bit_length()))


def pin_determinism(num_threads=1):
    """Pins what makes a CPU kernel's bits vary between runs: deterministic algorithms on,
    num_threads intra-op threads (how a reduction is split over threads changes its bits;
    every run to be compared must use the same count) and as many OpenBLAS threads when
    the system BLAS is OpenBLAS, one inter-op thread where it can still be set, and on CUDA no TF32 and cuDNN's deterministic algorithms (GPU runs are
    untested). Call it first, before any computation."""
    if not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"pin_determinism: num_threads must be an integer >= 1, got {num_threads!r}")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(num_threads)
    _pin_openblas_threads(num_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # Already set, or parallel work has started: inter-op threads do not split kernels.
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


class DeterministicDDP(torch.nn.Module):
    """Wraps `module` for bitwise-deterministic data-parallel training.

    Construction broadcasts the parameters and buffers from rank 0 (as DDP does). Each
    training step calls backward(batch, loss_fn) with this rank's slice of the global batch
    (global_batch_size // world_size samples, e.g. from an ElasticSampler), then the
    optimizer's step(). backward() leaves in every parameter's .grad the mean gradient over
    the global batch, identical to the bit on every rank and at every rank count, and
    returns the global mean loss (a Python float, the same on every rank). The .grad
    tensors are views of a flat buffer per dtype that backward() reuses (it sets them again
    if the optimizer set them to None).

    REQUIRES: world_size divides global_batch_size and micro_batch_size divides the
    per-rank batch; global_batch_size // micro_batch_size <= 1024; loss_fn returns the mean
    loss over its micro-batch; every rank calls backward() the same number of times. Layers
    whose output depends on the whole batch (BatchNorm) are refused: their statistics would
    depend on the micro-batch, their running buffers on the rank. Randomness (dropout) must
    not come from a per-rank generator: pass backward(..., step=k) with rng_seed set, and
    torch's generator is seeded for each micro-batch from (rng_seed, k, micro-batch index).
    """

    def __init__(self, module, global_batch_size, micro_batch_size, process_group=None,
                 rng_seed=None):
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.world_size = 1
        self.rank = 0
        if dist.is_available() and dist.is_initialized():
            self.world_size = dist.get_world_size(process_group)
            self.rank = dist.get_rank(process_group)
        for name, value in (("global_batch_size", global_batch_size),
                            ("micro_batch_size", micro_batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DeterministicDDP: {name} must be an integer >= 1, got {value!r}")
        if global_batch_size % self.world_size:
            raise ValueError(f"DeterministicDDP: world size {self.world_size} does not divide "
                             f"global_batch_size {global_batch_size}")
        per_rank = global_batch_size // self.world_size
        if per_rank % micro_batch_size:
            raise ValueError(f"DeterministicDDP: micro_batch_size {micro_batch_size} does not "
                             f"divide the per-rank batch {per_rank} (global_batch_size "
                             f"{global_batch_size} on {self.world_size} ranks)")
        if global_batch_size // micro_batch_size > _MAX_MICRO_BATCHES:
            raise ValueError(f"DeterministicDDP: {global_batch_size // micro_batch_size} "
                             f"micro-batches per global batch; at most {_MAX_MICRO_BATCHES} "
                             f"fit the exact fixed-point sum")
        for name, m in module.named_modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                raise ValueError(f"DeterministicDDP: {name or 'the module'} is a "
                                 f"{type(m).__name__}: batch statistics are not "
                                 f"deterministic across rank counts (use GroupNorm/LayerNorm)")
        self.global_batch_size = global_batch_size
        self.micro_batch_size = micro_batch_size
        self.per_rank_batch = per_rank
        self.rng_seed = rng_seed
        self._params = [p for p in module.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("DeterministicDDP: the module has no parameter that requires grad")
        for name, p in module.named_parameters():
            if p.requires_grad and p.dtype not in (torch.float32, torch.float64):
                raise ValueError(f"DeterministicDDP: parameter {name} is {p.dtype}; the exact "
                                 f"fixed-point conversion needs float32 or float64")
        self._numel = sum(p.numel() for p in self._params)
        self._micro_batches = global_batch_size // micro_batch_size
        self._bound = fixed_point_bound(self._micro_batches)
        # Dividing by a power of two is multiplying by its inverse, exactly (and faster).
        n_micro = self._micro_batches
        self._unscale = 1.0 / (FIXED_POINT_SCALE * n_micro) if n_micro & (n_micro - 1) == 0 else None
        # The step's fixed-point sum per parameter value and the loss: exact integers in
        # float64 (every partial sum stays within 2^53, see fixed_point_bound), summed
        # across ranks by one float64 all_reduce. Each group of parameters of one dtype has
        # a flat gradient buffer whose views are their .grad: backward() accumulates a
        # micro-batch's gradient there (into zeros: exactly the gradient), converts it in
        # place and adds it, widened to float64 in a scratch buffer, to the sum; each
        # micro-batch costs a handful of whole-buffer operations whatever the number of
        # parameters, and none allocates. At the end the buffer receives the mean gradient.
        # Preallocated: fresh large tensors cost page faults every time.
        self._sum = torch.zeros(self._numel + 1, dtype=torch.float64)
        self._groups = []  # (params, flat grad buffer, its .grad views, float64 scratch, slice of _sum)
        offset = 0
        for dtype in (torch.float32, torch.float64):
            params = [p for p in self._params if p.dtype == dtype]
            if not params:
                continue
            n = sum(p.numel() for p in params)
            flat = torch.zeros(n, dtype=dtype)
            views, at = [], 0
            for p in params:
                views.append(flat[at:at + p.numel()].view(p.shape))
                at += p.numel()
            wide = flat if dtype == torch.float64 else torch.zeros(n, dtype=torch.float64)
            self._groups.append((params, flat, views, wide, self._sum[offset:offset + n]))
            offset += n
        if self.world_size > 1:
            with torch.no_grad():
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.broadcast(t, 0, group=process_group)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def backward(self, batch, loss_fn, step=None):
        """Computes the global batch's mean gradient into the parameters' .grad and returns
        the global mean loss. `batch`: a tensor or a tuple/list of tensors whose first
        dimension is this rank's per_rank_batch samples; loss_fn(*micro_batch) returns the
        mean loss of one micro-batch (it calls this wrapper or the module)."""
        tensors = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        for t in tensors:
            if t.shape[0] != self.per_rank_batch:
                raise ValueError(f"DeterministicDDP.backward: a batch tensor has {t.shape[0]} "
                                 f"samples; this rank's slice of global batch "
                                 f"{self.global_batch_size} has {self.per_rank_batch}")
        m = self.micro_batch_size
        first_micro = self.rank * (self.per_rank_batch // m)
        bound = self._bound
        total = self._sum
        total.zero_()
        loss_sum = 0
        for params, flat, views, _, _ in self._groups:
            # The optimizer may have set .grad to None (zero_grad(set_to_none=True)).
            for p, v in zip(params, views):
                if p.grad is not v:
                    p.grad = v
        for k, lo in enumerate(range(0, self.per_rank_batch, m)):
            if self.rng_seed is not None and step is not None:
                torch.manual_seed(_micro_batch_seed(self.rng_seed, step, first_micro + k))
            for _, flat, _, _, _ in self._groups:
                flat.zero_()
            loss = loss_fn(*(t[lo:lo + m] for t in tensors))
            loss.backward()
            for _, flat, _, wide, acc in self._groups:
                # Exact: scaling by a power of two and rounding to an integer (in the
                # parameters' dtype), widening to float64, and the float64 sum of integers
                # whose partial sums stay within 2^53, in any order.
                flat.mul_(FIXED_POINT_SCALE).round_().clamp_(-bound, bound)
                if wide is not flat:
                    wide.copy_(flat)
                acc.add_(wide)
            loss_sum += _to_fixed(float(loss), bound)
        total[self._numel] = float(loss_sum)
        if self.world_size > 1:
            # Exact like an int64 sum: the same integers, each partial sum within 2^53.
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.process_group)
        # The mean over the global batch's micro-batches, rounded once (to float64, then to
        # the parameters' dtype). Dividing by a power of two is multiplying by its inverse.
        if self._unscale is not None:
            total.mul_(self._unscale)
        else:
            total.div_(FIXED_POINT_SCALE * self._micro_batches)
        for _, flat, _, _, mean in self._groups:
            flat.copy_(mean)
        return float(total[self._numel])


def _pin_openblas_threads(num_threads):
    """Debian's torch calls the system BLAS (libblas.so.3), which torch.set_num_threads does
    not reach; when it is OpenBLAS, set its thread count too."""
    try:
        blas = ctypes.CDLL("libblas.so.3")
        blas.openblas_set_num_threads(ctypes.c_int(num_threads))
    except (OSError, AttributeError):
        pass  # Not OpenBLAS (or none loaded): nothing to pin.


def deterministic_ddp(module, global_batch_size, micro_batch_size, process_group=None,
                      rng_seed=None, num_threads=1):
    """pin_determinism(num_threads), then DeterministicDDP(module, ...)."""
    pin_determinism(num_threads)
    return DeterministicDDP(module, global_batch_size, micro_batch_size,
                            process_group=process_group, rng_seed=rng_seed)


def _to_fixed(value, bound):
    """round_half_even(value * 2^32) clamped to +-bound, as a Python int."""
    if value != value:
        raise FloatingPointError("DeterministicDDP: the loss of a micro-batch is NaN")
    # Clamping first (to an integer bound) gives the same result and keeps infinities out.
    return int(round(max(-bound, min(bound, value * FIXED_POINT_SCALE))))


def _micro_batch_seed(seed, step, micro_index):
    return mix64(mix64(seed & ((1 << 64) - 1)) ^ mix64(((step << 32) ^ micro_index)
                                                      & ((1 << 64) - 1))) >> 1
