"""Bitwise-deterministic data-parallel training for PyTorch, at any rank count.

DeterministicDDP replaces DistributedDataParallel's float all-reduce with det's
deterministic mode (docs/determinism.md, docs/pytorch-data-and-determinism.md): each
global batch is trained as the same fixed micro-batches of micro_batch_size samples
whatever the rank count (rank r of W trains the micro-batches of its contiguous slice);
each micro-batch's gradient and loss are scaled by 2^32, rounded to integers and summed
exactly, locally and across ranks with one all_reduce (the integers are carried in float64:
every partial sum stays within 2^53, where float64 addition is exact, so neither the order
nor the grouping of the sum matters and the result is the int64 sum, bit for bit; an int64
buffer would add two conversions per step), then divided once. The clamping, rounding and
sum run in one pass over memory in a small C library built beside this module
(fixed_point.cc, loaded with ctypes: no torch headers, any torch version); without it a
torch/numpy fallback computes the same bits in several passes. Together with
pin_determinism() (deterministic kernels, a fixed intra-op thread count) the training is
bitwise identical on 1, 2, 4, ... ranks and across checkpoint, resize and resume.
"""

import ctypes
import os

import torch
try:
    import numpy as _np  # Widening adds (see _Group.add_fallback); torch's own ops otherwise.
except ImportError:
    _np = None  # type: ignore[assignment]
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
            if p.requires_grad and p.device.type != "cpu":
                raise ValueError(f"DeterministicDDP: parameter {name} is on {p.device}; "
                                 f"deterministic mode runs on the CPU only (its fixed-point "
                                 f"sums are host memory; no GPU path is built or tested)")
        self._numel = sum(p.numel() for p in self._params)
        self._micro_batches = global_batch_size // micro_batch_size
        self._bound = fixed_point_bound(self._micro_batches)
        # The step's fixed-point sum per parameter value and the loss: exact integers in
        # float64 (every partial sum stays within 2^53, see fixed_point_bound), summed
        # across ranks by one float64 all_reduce. Each group of parameters of one dtype has
        # a flat gradient buffer whose views are their .grad between steps. For each
        # micro-batch backward() leaves .grad unset and back-propagates the loss times 2^32,
        # so autograd stores each parameter's gradient, already in fixed-point units, as it
        # is computed (no zeroing, no accumulation pass, no scaling pass). With the native
        # library (fixed_point.cc) the fresh gradients of up to self._hold_limit
        # micro-batches are kept and clamped, rounded and added to the sum in one pass; the
        # fallback clamps each micro-batch's gradients into the flat buffer, rounds it and
        # adds it, widened to float64, to the sum (whole-buffer torch/numpy operations, none
        # of which allocates). Both give the same bits. At the end the flat buffer receives
        # the mean gradient. Preallocated: fresh large tensors cost page faults every time.
        self._sum = torch.zeros(self._numel + 1, dtype=torch.float64)
        self._hold_limit = _hold_limit(self._params)
        self._groups = []
        offset = 0
        for dtype in (torch.float32, torch.float64):
            params = [p for p in self._params if p.dtype == dtype]
            if params:
                self._groups.append(_Group(params, dtype, self._sum[offset:offset + sum(
                    p.numel() for p in params)]))
                offset += self._groups[-1].numel
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
        native = NATIVE  # Parameters are on the CPU (checked at construction).
        for group in self._groups:
            group.drop_held()  # What a step that raised (a NaN loss) left behind.
        held = 0  # Micro-batches whose gradients the groups hold (native path).
        flushed = False  # Whether the sum has this step's first micro-batches yet.
        loss_sum = 0
        for k, lo in enumerate(range(0, self.per_rank_batch, m)):
            if self.rng_seed is not None and step is not None:
                _seed_generators(_micro_batch_seed(self.rng_seed, step, first_micro + k))
            # With no .grad, autograd stores each parameter's fresh gradient as its .grad
            # (no zeroing, no accumulation pass).
            for group in self._groups:
                for p in group.params:
                    p.grad = None
            loss = loss_fn(*(t[lo:lo + m] for t in tensors))
            # Back-propagating loss x 2^32 gives the gradients x 2^32, bit for bit: a backward
            # pass is linear in the incoming gradient, and a power-of-two factor passes
            # exactly through floating-point sums, products and quotients (short of float32's
            # overflow near 3.4e38 / 2^32 = 7.9e28, which the clamp saturates anyway, and of
            # its subnormals, far below the fixed-point resolution). The scaling pass over the
            # gradients is gone; tensor hooks inside the model see the scaled gradients (as
            # under AMP's GradScaler).
            (loss * FIXED_POINT_SCALE).backward()
            if native is not None:
                for group in self._groups:
                    group.hold()
                held += 1
                if held == self._hold_limit:
                    for group in self._groups:
                        group.flush_native(native, bound, accumulate=flushed)
                    held, flushed = 0, True
            else:
                for group in self._groups:
                    group.add_fallback(bound, first=k == 0)
            loss_sum += _to_fixed(float(loss.detach()), bound)
        if native is not None and (held or not flushed):
            for group in self._groups:
                group.flush_native(native, bound, accumulate=flushed)
        self._sum[self._numel] = float(loss_sum)
        if self.world_size > 1:
            # Exact like an int64 sum: the same integers, each partial sum within 2^53.
            dist.all_reduce(self._sum, op=dist.ReduceOp.SUM, group=self.process_group)
        # The mean over the global batch's micro-batches, rounded once (to float64, then to
        # the parameters' dtype); the .grad are the flat buffers' views again.
        for group in self._groups:
            group.mean_into_grad(self._micro_batches, native)
        return _mean(float(self._sum[self._numel]), self._micro_batches)


# Micro-batches whose gradients the native path keeps before adding them to the sum: each
# pass over the sum then adds this many (fewer passes), at the cost of as many gradient
# copies alive at once; never more than _HELD_BYTES of them (a large model adds each
# micro-batch's gradients at once: still one pass, no copy kept).
_HELD_MICRO_BATCHES = 8
_HELD_BYTES = 256 << 20


def _hold_limit(params):
    """How many micro-batches' gradients the native path holds for `params`."""
    per_micro_batch = sum(p.numel() * p.element_size() for p in params)
    return max(1, min(_HELD_MICRO_BATCHES, _HELD_BYTES // max(per_micro_batch, 1)))


class _Group:
    """The parameters of one dtype: their flat gradient buffer (whose views are their .grad
    between steps), their slice of the step's float64 sum, and the native path's held
    gradients or the fallback's scratch."""

    def __init__(self, params, dtype, acc):
        self.params = params
        self.dtype = dtype
        self.numel = sum(p.numel() for p in params)
        self.flat = torch.zeros(self.numel, dtype=dtype)
        self.views, at = [], 0
        for p in params:
            self.views.append(self.flat[at:at + p.numel()].view(p.shape))
            at += p.numel()
        self.acc = acc
        self.held = [[] for _ in params]
        # The fallback: numpy views (numpy widens inside its add), or a float64 scratch
        # for torch's own widening copy when numpy is missing.
        self.flat_np = self.acc_np = self.wide = None
        if _np is not None:
            self.flat_np, self.acc_np = self.flat.numpy(), acc.numpy()
        elif dtype != torch.float64:
            self.wide = torch.zeros(self.numel, dtype=torch.float64)
        else:
            self.wide = self.flat

    def hold(self):
        """Keeps each parameter's fresh gradient (contiguous, the group's dtype) for the
        next flush_native and unsets .grad."""
        for held, p in zip(self.held, self.params):
            g = p.grad
            if g is not None:
                if g.is_sparse:
                    g = g.to_dense()
                if not g.is_contiguous():
                    g = g.contiguous()
                held.append(g)
                p.grad = None

    def drop_held(self):
        for held in self.held:
            held.clear()

    def flush_native(self, native, bound, accumulate):
        """Adds the held gradients, clamped and rounded, to the group's slice of the sum
        (or replaces it), in one call; a parameter with no held gradient adds nothing."""
        count = max((len(h) for h in self.held), default=0)
        pointers = (ctypes.c_void_p * (len(self.params) * max(count, 1)))()
        sizes = (ctypes.c_int64 * len(self.params))()
        for j, (held, p) in enumerate(zip(self.held, self.params)):
            sizes[j] = p.numel()
            for k, g in enumerate(held):
                pointers[j * count + k] = g.data_ptr()
        fn = native.det_fixed_sum_many_f32 if self.dtype == torch.float32 \
            else native.det_fixed_sum_many_f64
        fn(pointers, sizes, len(self.params), count, ctypes.c_double(bound),
           ctypes.c_void_p(self.acc.data_ptr()), 1 if accumulate else 0)
        self.drop_held()

    def add_fallback(self, bound, first):
        """One micro-batch's gradients clamped into the flat buffer, rounded, and added
        widened to float64 to the sum (replacing it for the step's first micro-batch)."""
        for p, v in zip(self.params, self.views):
            g = p.grad
            if g is None:  # Not used by this micro-batch's loss.
                v.zero_()
            else:
                # Exact: the clamp to an integer bound and the rounding to an integer (in
                # the parameters' dtype; clamping first gives the same integers).
                torch.clamp(g.to_dense() if g.is_sparse else g, -bound, bound, out=v)
                p.grad = None
        self.flat.round_()
        # Widened to float64 and added to the sum; the first micro-batch replaces it (as
        # 0.0 + value: a -0.0 becomes 0.0). Exact: integers whose partial sums stay within
        # 2^53. With numpy, one pass over each buffer: numpy widens in cache-sized chunks
        # inside the add, 2-3x faster here than torch's copy_ into a float64 scratch then
        # add_ (torch's mixed-dtype add_ is slower still).
        if self.flat_np is not None:
            _np.add(self.flat_np if first else self.acc_np,
                    _ZERO if first else self.flat_np, out=self.acc_np)
            return
        if first:
            self.acc.zero_()
        if self.wide is not self.flat:
            self.wide.copy_(self.flat)
        self.acc.add_(self.wide)

    def mean_into_grad(self, micro_batches, native):
        """The flat buffer = the group's slice of the step's sum as the mean over the
        micro-batches, computed in float64 and rounded once to the parameters' dtype (one
        pass, native or numpy); the parameters' .grad are its views again."""
        divisor = FIXED_POINT_SCALE * micro_batches
        power_of_two = micro_batches & (micro_batches - 1) == 0
        if native is not None:
            fn = native.det_fixed_mean_f32 if self.dtype == torch.float32 \
                else native.det_fixed_mean_f64
            fn(ctypes.c_void_p(self.acc.data_ptr()), self.numel, ctypes.c_double(divisor),
               1 if power_of_two else 0, ctypes.c_void_p(self.flat.data_ptr()))
        elif self.flat_np is not None:
            if power_of_two:
                _np.multiply(self.acc_np, 1.0 / divisor, out=self.flat_np, casting="unsafe")
            else:
                _np.divide(self.acc_np, divisor, out=self.flat_np, casting="unsafe")
        else:
            if power_of_two:
                self.acc.mul_(1.0 / divisor)
            else:
                self.acc.div_(divisor)
            self.flat.copy_(self.acc)
        for p, v in zip(self.params, self.views):
            p.grad = v


def _load_native():
    """The fixed-point library built beside this module (fixed_point.cc), or None: then
    the torch/numpy fallback computes the same bits, more slowly. DET_FIXED_POINT_NATIVE=0
    forces the fallback."""
    if os.environ.get("DET_FIXED_POINT_NATIVE", "1") == "0":
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fixed_point.so")
    try:
        lib = ctypes.CDLL(path)
        if lib.det_fixed_point_abi() != _NATIVE_ABI:
            return None
    except (OSError, AttributeError):
        return None
    pointers, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    for name in ("det_fixed_sum_many_f32", "det_fixed_sum_many_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.POINTER(pointers), ctypes.POINTER(i64), i32, i32,
                       ctypes.c_double, pointers, i32]
        fn.restype = None
    lib.det_fixed_point_isa.restype = ctypes.c_int
    for name in ("det_fixed_mean_f32", "det_fixed_mean_f64"):
        fn = getattr(lib, name)
        fn.argtypes = [pointers, i64, ctypes.c_double, i32, pointers]
        fn.restype = None
    return lib


_NATIVE_ABI = 1
NATIVE = _load_native()


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


_ZERO = None if _np is None else _np.float64(0.0)


def _mean(fixed_sum, micro_batches):
    """A fixed-point sum over a global batch's micro-batches as their mean (float64):
    dividing by a power of two is multiplying by its inverse, exactly."""
    divisor = FIXED_POINT_SCALE * micro_batches
    if micro_batches & (micro_batches - 1) == 0:
        return fixed_sum * (1.0 / divisor)
    return fixed_sum / divisor


def _seed_generators(seed):
    """torch.manual_seed(seed) without its cost: torch.manual_seed also queues a CUDA seeding
    with a formatted stack trace when CUDA is not initialized (about 80 us a call here)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


def _to_fixed(value, bound):
    """round_half_even(value * 2^32) clamped to +-bound, as a Python int."""
    if value != value:
        raise FloatingPointError("DeterministicDDP: the loss of a micro-batch is NaN")
    # Clamping first (to an integer bound) gives the same result and keeps infinities out.
    return int(round(max(-bound, min(bound, value * FIXED_POINT_SCALE))))


def _micro_batch_seed(seed, step, micro_index):
    return mix64(mix64(seed & ((1 << 64) - 1)) ^ mix64(((step << 32) ^ micro_index)
                                                      & ((1 << 64) - 1))) >> 1
