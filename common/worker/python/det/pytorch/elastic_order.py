"""det's elastic sample order, bit-exact with common/worker/cpp/data/elastic_sampler (stdlib
only; numpy, when there, computes the shuffles' random draws faster).

The global sample sequence of an epoch is a pure function of (seed, epoch,
num_canonical_nodes, dataset size) and never of the number of ranks: the data set is split
into num_canonical_nodes contiguous partitions, each shuffled on its own (Fisher-Yates over
a splitmix64-seeded mt19937_64), and the global order takes one sample of each partition in
turn. Each global step takes the next window of global_batch_size positions; rank r of W
takes positions [r*B/W, (r+1)*B/W) of it. The remainder of an epoch (fewer than B
positions) is dropped.
"""

ALGORITHM = "elastic_canonical"  # common/worker/cpp/data/elastic_sampler.h kElasticOrderAlgorithm
VERSION = 1  # kElasticOrderVersion

_M64 = (1 << 64) - 1


def mix64(x):
    """splitmix64's finalizer (common/worker/cpp/data Mix64) on a uint64."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class Mt19937_64:
    """std::mt19937_64 seeded with one value: the same outputs as the C++ engine."""

    _N = 312
    _M = 156
    _A = 0xB5026F5AA96619E9
    _UPPER = 0xFFFFFFFF80000000
    _LOWER = 0x7FFFFFFF

    def __init__(self, seed):
        mt = [0] * self._N
        mt[0] = seed & _M64
        for i in range(1, self._N):
            prev = mt[i - 1]
            mt[i] = (6364136223846793005 * (prev ^ (prev >> 62)) + i) & _M64
        self._mt = mt
        self._out = []
        self._next = 0

    def _twist(self):
        mt, n, m, a = self._mt, self._N, self._M, self._A
        upper, lower = self._UPPER, self._LOWER
        for i in range(n):
            x = (mt[i] & upper) | (mt[(i + 1) % n] & lower)
            xa = x >> 1
            if x & 1:
                xa ^= a
            mt[i] = mt[(i + m) % n] ^ xa
        out = []
        for y in mt:
            y ^= (y >> 29) & 0x5555555555555555
            y ^= (y << 17) & 0x71D67FFFEDA60000
            y ^= (y << 37) & 0xFFF7EEE000000000
            y ^= y >> 43
            out.append(y)
        self._out = out
        self._next = 0

    def __call__(self):
        if self._next >= self._N:
            self._twist()
        elif not self._out:
            self._twist()
        v = self._out[self._next]
        self._next += 1
        return v


def _fisher_yates_draws(seed, size):
    """The swap partners j of a Fisher-Yates shuffle of `size` elements over
    Mt19937_64(seed), for i = size - 1 down to 1 (j = (rng() * (i + 1)) >> 64), computed with
    numpy (the engine's twist and the 64x32-bit high products vectorized: the same values
    as the pure-Python loop, about 15 times faster); None without numpy, or beyond 2**32
    elements (where the split product would not be exact)."""
    if size < 2 or size >= 1 << 32:
        return None
    try:
        import numpy as np
    except ImportError:
        return None
    n, m = Mt19937_64._N, Mt19937_64._M
    u = np.uint64
    upper, lower, a = u(Mt19937_64._UPPER), u(Mt19937_64._LOWER), u(Mt19937_64._A)
    one, low32 = u(1), u(0xFFFFFFFF)
    mt = np.array(Mt19937_64(seed)._mt, dtype=np.uint64)
    outputs = []
    for _ in range(-(-(size - 1) // n)):
        # The twist in three slices, each reading what the sequential loop reads: entries
        # i + 1 before their update, (i + m) % n before it for i < n - m and after it beyond.
        x = (mt[:n - m] & upper) | (mt[1:n - m + 1] & lower)
        mt[:n - m] = mt[m:] ^ (x >> one) ^ ((x & one) * a)
        x = (mt[n - m:n - 1] & upper) | (mt[n - m + 1:] & lower)
        mt[n - m:n - 1] = mt[:m - 1] ^ (x >> one) ^ ((x & one) * a)
        x = (mt[n - 1] & upper) | (mt[0] & lower)
        mt[n - 1] = mt[m - 1] ^ (x >> one) ^ ((x & one) * a)
        y = mt.copy()
        y ^= (y >> u(29)) & u(0x5555555555555555)
        y ^= (y << u(17)) & u(0x71D67FFFEDA60000)
        y ^= (y << u(37)) & u(0xFFF7EEE000000000)
        y ^= y >> u(43)
        outputs.append(y)
    r = np.concatenate(outputs)[:size - 1]
    k = np.arange(size, 1, -1, dtype=np.uint64)  # i + 1
    # (r * k) >> 64 with k < 2**32: r = hi * 2**32 + lo, so the high word is
    # (hi * k + ((lo * k) >> 32)) >> 32, every term below 2**64.
    hi, lo = r >> u(32), r & low32
    return ((hi * k + ((lo * k) >> u(32))) >> u(32)).tolist()


def elastic_epoch_order(n, seed, epoch, num_canonical_nodes):
    """The global order of `epoch`: a permutation of range(n) (common/worker/cpp/data ElasticEpochOrder)."""
    if n < 0 or num_canonical_nodes < 1:
        raise ValueError(
            f"elastic order: need n >= 0 and num_canonical_nodes >= 1, got n={n}, "
            f"num_canonical_nodes={num_canonical_nodes}")
    c = max(1, min(num_canonical_nodes, max(1, n)))
    begin = [n * p // c for p in range(c + 1)]
    scratch = list(range(n))
    base = mix64(seed & _M64) ^ mix64((epoch * 0x100000001B3 + 1) & _M64)
    for p in range(c):
        lo, size = begin[p], begin[p + 1] - begin[p]
        partition_seed = mix64(base ^ ((p * 0xD6E8FEB86659FD93) & _M64))
        draws = _fisher_yates_draws(partition_seed, size)
        if draws is not None:
            part = scratch[lo:lo + size]
            for i, j in zip(range(size - 1, 0, -1), draws):
                part[i], part[j] = part[j], part[i]
            scratch[lo:lo + size] = part
            continue
        rng = Mt19937_64(partition_seed)
        for i in range(size - 1, 0, -1):
            j = (rng() * (i + 1)) >> 64
            scratch[lo + i], scratch[lo + j] = scratch[lo + j], scratch[lo + i]
    if c == 1:
        return scratch
    order = []
    rounds = begin[1] - begin[0] + 1
    for k in range(rounds):
        for p in range(c):
            if begin[p] + k < begin[p + 1]:
                order.append(scratch[begin[p] + k])
    return order


def sample_key(seed, epoch, position):
    """The key of the sample at `position` of `epoch` (common/worker/cpp/data SampleKey): seeds that
    sample's randomness (augmentation, dropout) whichever rank reads it."""
    return mix64(mix64((seed ^ 0x5BD1E995) & _M64)
                 ^ mix64((((epoch & _M64) << 32) & _M64) ^ (position & _M64)))
