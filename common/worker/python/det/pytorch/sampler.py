"""det.pytorch.ElasticSampler: det's elastic sample order (elastic_order.py) as a torch
Sampler with state_dict()/load_state_dict()."""

import json

import torch.distributed
import torch.utils.data

from .elastic_order import ALGORITHM, VERSION, elastic_epoch_order, sample_key

_M64 = (1 << 64) - 1


def _default_rank_world():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class ElasticSampler(torch.utils.data.Sampler):
    """A torch Sampler yielding this rank's share of det's elastic order, epoch after epoch.

    Use it with DataLoader(dataset, batch_size=global_batch_size // world_size,
    sampler=sampler, drop_last=False): each DataLoader batch is this rank's slice of one
    global step's window, and every rank count dividing global_batch_size sees the same
    global windows in the same order.

    One iteration covers the rest of the current epoch (from the position a loaded state
    points at); when it is exhausted the sampler stands at the start of the next epoch, so
    a later iteration continues there, like the C++ ElasticLoader. set_epoch(e) (the
    DistributedSampler habit) moves to the start of epoch e unless the sampler is already
    in epoch e.

    state_dict() is the global position (epoch, samples consumed in it), the seed, the
    canonical node count and the data set's identity, with the field names of the C++
    LoaderState's JSON; load_state_dict() resumes there without replaying any batch, at
    any world size dividing the global batch. The position counts the windows whose last
    index this rank's iterator has handed out: exact with DataLoader(num_workers=0); with
    worker processes the DataLoader reads ahead, so pass state_dict(batches_consumed=k),
    the batches the training loop took since the iteration began.
    """

    def __init__(self, dataset_size, global_batch_size, seed=0, num_canonical_nodes=1,
                 rank=None, world_size=None, dataset_fingerprint=0):
        # No super().__init__(): torch 1.13's Sampler.__init__ takes a data_source and does
        # nothing with it, torch 2.x's has none (object.__init__ refuses an argument).
        if rank is None or world_size is None:
            r, w = _default_rank_world()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        _check_int("dataset_size", dataset_size, 1)
        _check_int("global_batch_size", global_batch_size, 1)
        _check_int("num_canonical_nodes", num_canonical_nodes, 1)
        _check_int("world_size", world_size, 1)
        _check_int("seed", seed, 0)
        if global_batch_size > dataset_size:
            raise ValueError(f"ElasticSampler: global_batch_size {global_batch_size} is larger "
                             f"than the data set ({dataset_size} samples)")
        if global_batch_size % world_size:
            raise ValueError(f"ElasticSampler: world_size {world_size} does not divide "
                             f"global_batch_size {global_batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"ElasticSampler: rank {rank} is outside world_size {world_size}")
        self.dataset_size = dataset_size
        self.global_batch_size = global_batch_size
        self.seed = seed & _M64
        self.num_canonical_nodes = num_canonical_nodes
        self.rank = rank
        self.world_size = world_size
        self.dataset_fingerprint = dataset_fingerprint & _M64
        self.epoch = 0
        self.samples_in_epoch = 0
        self._iter_epoch, self._iter_start = 0, 0
        self._order = None
        self._order_epoch = -1

    # -- torch Sampler protocol --------------------------------------------------------

    def __len__(self):
        """Indices left for this rank in the current epoch."""
        windows = (self.dataset_size - self.samples_in_epoch) // self.global_batch_size
        return windows * self.per_rank_batch

    def __iter__(self):
        if self.samples_in_epoch + self.global_batch_size > self.dataset_size:
            self.epoch += 1
            self.samples_in_epoch = 0
        order = self.epoch_order(self.epoch)
        per, off = self.per_rank_batch, self.rank * self.per_rank_batch
        self._iter_epoch, self._iter_start = self.epoch, self.samples_in_epoch
        while self.samples_in_epoch + self.global_batch_size <= self.dataset_size:
            first = self.samples_in_epoch + off
            ids = order[first:first + per]
            yield from ids[:-1]
            # The window counts as consumed once its last index is handed out.
            self.samples_in_epoch += self.global_batch_size
            yield ids[-1]
        self.epoch += 1
        self.samples_in_epoch = 0

    # -- position ---------------------------------------------------------------------

    @property
    def per_rank_batch(self):
        return self.global_batch_size // self.world_size

    def set_epoch(self, epoch):
        _check_int("epoch", epoch, 0)
        if epoch != self.epoch:
            self.epoch = epoch
            self.samples_in_epoch = 0
            self._iter_epoch, self._iter_start = epoch, 0

    def epoch_order(self, epoch):
        """The global order of `epoch` (cached for the current epoch)."""
        if self._order_epoch != epoch:
            self._order = elastic_epoch_order(self.dataset_size, self.seed, epoch,
                                              self.num_canonical_nodes)
            self._order_epoch = epoch
        return self._order

    def position_keys(self, batch_index):
        """sample_key() of each sample of this rank's batch `batch_index` of the latest
        iteration (in DataLoader order): per-sample randomness independent of the rank."""
        first = self._iter_start + batch_index * self.global_batch_size + \
            self.rank * self.per_rank_batch
        return [sample_key(self.seed, self._iter_epoch, first + i)
                for i in range(self.per_rank_batch)]

    # -- checkpoints ------------------------------------------------------------------

    def state_dict(self, batches_consumed=None):
        epoch, pos = self.epoch, self.samples_in_epoch
        if batches_consumed is not None:
            _check_int("batches_consumed", batches_consumed, 0)
            epoch = self._iter_epoch
            pos = self._iter_start + batches_consumed * self.global_batch_size
            if pos > self.dataset_size:
                raise ValueError(f"ElasticSampler.state_dict: {batches_consumed} batches "
                                 f"consumed runs past the end of epoch {epoch}")
        return {
            "epoch": epoch,
            "samples_in_epoch": pos,
            "num_canonical_nodes": self.num_canonical_nodes,
            "seed": self.seed,
            "algorithm": ALGORITHM,
            "version": VERSION,
            "dataset_fingerprint": "%016x" % self.dataset_fingerprint,
            "dataset_size": self.dataset_size,
        }

    def load_state_dict(self, state):
        """Resumes at `state` (from state_dict() here or the C++ LoaderState JSON). The
        state's seed and canonical node count replace this sampler's; this sampler's rank
        and world size stay. ValueError naming the field when the state is not one, or was
        written for another algorithm version or data set."""
        if isinstance(state, (str, bytes)):
            state = json.loads(state)
        if not isinstance(state, dict):
            raise ValueError("ElasticSampler.load_state_dict: the state is not a dict")
        fields = ("epoch", "samples_in_epoch", "num_canonical_nodes", "seed", "algorithm",
                  "version", "dataset_fingerprint", "dataset_size")
        for f in fields:
            if f not in state:
                raise ValueError(f"ElasticSampler.load_state_dict: missing field '{f}'")
        if state["algorithm"] != ALGORITHM or state["version"] != VERSION:
            raise ValueError(
                f"ElasticSampler.load_state_dict: the state's sample order is "
                f"{state['algorithm']} version {state['version']}; this one is {ALGORITHM} "
                f"version {VERSION}: resuming would silently change the order")
        try:
            fingerprint = int(state["dataset_fingerprint"], 16)
        except (TypeError, ValueError):
            raise ValueError("ElasticSampler.load_state_dict: dataset_fingerprint is not a hex "
                             f"string: {state['dataset_fingerprint']!r}") from None
        if fingerprint != self.dataset_fingerprint or state["dataset_size"] != self.dataset_size:
            raise ValueError(
                f"ElasticSampler.load_state_dict: the state was written for a data set of "
                f"{state['dataset_size']} examples with fingerprint {fingerprint:016x}; this "
                f"sampler's has {self.dataset_size} examples with fingerprint "
                f"{self.dataset_fingerprint:016x}")
        for f in ("epoch", "samples_in_epoch", "seed"):
            _check_int(f, state[f], 0)
        _check_int("num_canonical_nodes", state["num_canonical_nodes"], 1)
        self.epoch = state["epoch"]
        self.samples_in_epoch = state["samples_in_epoch"]
        self.seed = state["seed"]
        self.num_canonical_nodes = state["num_canonical_nodes"]
        self._iter_epoch, self._iter_start = self.epoch, self.samples_in_epoch
        self._order_epoch = -1


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"ElasticSampler: {name} must be an integer >= {minimum}, got {value!r}")
