"""PreemptContext: whether the trial's workers should stop at the next step boundary
(Determined's det.core.PreemptContext). The answer comes from the master (ShouldPreempt,
long-polled by a background thread: the experiment was paused or killed, the trial was
preempted or stopped by its searcher) or from a SIGTERM this process received."""

import contextlib
import enum
import os
import signal
import sys
import threading
from typing import Any, Iterator, List, Optional, Tuple

from det import _client
from det.core import _distributed


class PreemptMode(enum.Enum):
    """Who calls PreemptContext.should_preempt() (Determined's PreemptMode)."""

    # Every rank calls should_preempt() (a collective); the chief asks the master and the
    # answer is shared, so every rank stops at the same step. The default.
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    # Only the chief calls should_preempt().
    ChiefOnly = "CHIEF_ONLY"
    # Every rank asks the master itself; no collective.
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext:
    """Asks the master from start() (det.core.init()), as Determined's does: start() tells
    the master at once, with one ShouldPreempt that does not wait, that this run answers
    should_preempt(), so a pause, a preemption or a searcher's early stop gives it the stop
    grace period to checkpoint and exit (a plain script that never starts one gets SIGTERM at
    once); then a background thread long-polls until close(). should_preempt() is called
    from the thread that trains (the main thread, to see SIGTERM)."""

    _POLL_MS = 30_000

    def __init__(self, client: _client.WorkerClient, dist: _distributed.DistributedContext,
                 mode: PreemptMode = PreemptMode.WorkersAskChief, on_cluster: bool = True) -> None:
        mode = PreemptMode(mode)
        self._client = client
        self._dist = dist
        self._mode = mode
        self._on_cluster = on_cluster
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._preempt = False          # GUARDED_BY(_lock)
        self._reason = ""              # GUARDED_BY(_lock)
        self._error: Optional[BaseException] = None  # GUARDED_BY(_lock)
        self._closed = False           # GUARDED_BY(_lock)
        self._sigterm = False
        self._asked = False
        # Checkpoint stores under way (_holding_sigterm) and a SIGTERM they hold back.
        self._held = 0
        self._sigterm_held = False
        self._previous_handler: Any = None
        self._thread: Optional[threading.Thread] = None
        self._started = False

    @property
    def reason(self) -> str:
        """Why should_preempt() said True ("" before)."""
        with self._lock:
            return self._reason

    def _polls(self) -> bool:
        return self._on_cluster and (self._mode == PreemptMode.WorkersAskMaster or
                                     self._dist.rank == 0)

    def start(self) -> "PreemptContext":
        """Starts asking the master (RuntimeError when called twice, as in Determined): the
        master has heard from this rank (the chief, or every rank in WorkersAskMaster mode)
        when it returns."""
        if self._started:
            raise RuntimeError("PreemptContext.start() was already called")
        self._started = True
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        if self._polls() and self._ask(0):
            self._thread = threading.Thread(target=self._poll, name="det-preempt", daemon=True)
            self._thread.start()
        return self

    def __enter__(self) -> "PreemptContext":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cond.notify_all()
        if self._previous_handler is not None:
            with self._lock:
                stopping = self._preempt
            # Once told to stop, the script is exiting: the agent's SIGTERM that may still
            # come must not turn a clean exit into a death by signal (its SIGKILL after
            # kill_grace still applies).
            # SIG_IGN, not a Python handler: Python resets its own handlers to SIG_DFL
            # when the interpreter finalizes.
            signal.signal(signal.SIGTERM, signal.SIG_IGN if stopping else self._previous_handler)
            self._previous_handler = None

    def _on_sigterm(self, signum, frame) -> None:
        self._sigterm = True
        with self._lock:
            if not self._preempt:
                self._preempt, self._reason = True, "SIGTERM received"
        if not self._asked:
            # The script never asks should_preempt(): SIGTERM ends it as it would without det,
            # once the checkpoint being stored is registered.
            if self._held:
                self._sigterm_held = True
                os.write(2, b"det: SIGTERM received while a checkpoint is stored: exiting once "
                            b"it is registered\n")
                return
            self._end_by_sigterm()

    @staticmethod
    def _end_by_sigterm() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

    @contextlib.contextmanager
    def _holding_sigterm(self) -> Iterator[None]:
        """While inside (CheckpointContext.store_path: a checkpoint written, then registered),
        a SIGTERM that would end a script which never asked should_preempt() waits until the
        outermost one is left, then ends the process. The agent's SIGKILL, kill_grace after
        its SIGTERM, still bounds the wait. Main thread only (where SIGTERM is handled)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if self._held == 0 and self._sigterm_held:
                self._sigterm_held = False
                self._end_by_sigterm()

    def _poll(self) -> None:
        while self._ask(self._POLL_MS):
            pass

    def _ask(self, wait_ms: int) -> bool:
        """One ShouldPreempt waiting up to `wait_ms`; whether to keep asking (False once
        closed, told to stop, or the master cannot answer: its error goes to the training
        thread)."""
        with self._lock:
            if self._closed or self._preempt:
                return False
        try:
            preempt, reason = self._client.should_preempt(wait_ms)
        except _client.UnimplementedError as e:
            # An older master: only SIGTERM says stop.
            print(f"det: {e}; should_preempt() answers from SIGTERM alone",
                  file=sys.stderr, flush=True)
            return False
        except Exception as e:  # noqa: B902 (handed to the training thread)
            with self._lock:
                if not self._closed:
                    self._error = e
            return False
        if preempt:
            with self._lock:
                if not self._preempt:
                    self._preempt, self._reason = True, reason or "asked by the master"
            return False
        return True

    def _local(self) -> bool:
        with self._lock:
            if self._error is not None and not self._preempt:
                error = self._error
                if isinstance(error, _client.AllocationEndedError):
                    raise _client.AllocationEndedError(f"should_preempt: {error}")
                raise _client.MasterError(f"should_preempt: {error}")
            return self._preempt

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the workers should save what they need and exit. With
        PreemptMode.WorkersAskChief every rank must call it at the same points.
        AllocationEndedError when the master says the allocation has ended; MasterError when
        the master cannot be asked. auto_ack: accepted for Determined's signature; det's
        master needs no acknowledgement (it knows it asked the trial to stop)."""
        vote = self._vote()
        if self._mode != PreemptMode.WorkersAskChief or self._dist.size == 1:
            return vote
        # The chief's answer, or any rank's SIGTERM.
        answers = self._dist.allgather((vote, self.reason))
        preempt = any(a for a, _ in answers)
        if preempt:
            self._agree(answers)
        return preempt

    def _vote(self) -> bool:
        """This rank's part of should_preempt(), without its collective: in WorkersAskChief
        mode the chief's answer or another rank's SIGTERM, else this rank's answer. For a
        caller that combines the votes of every rank with flags of its own in one collective
        (det.pytorch's Trainer, once a batch); REQUIRES: when any rank voted True, every
        rank then calls _agree with every rank's (vote, reason)."""
        if not self._started:
            raise RuntimeError("PreemptContext.should_preempt() before PreemptContext.start()")
        self._asked = True
        if self._mode == PreemptMode.ChiefOnly and self._dist.rank != 0:
            raise RuntimeError("should_preempt: PreemptMode.ChiefOnly: only the chief may call it "
                               f"(rank {self._dist.rank} did)")
        if self._mode != PreemptMode.WorkersAskChief or self._dist.size == 1 or \
                self._dist.rank == 0:
            return self._local()
        return self._sigterm

    def _agree(self, answers: List[Tuple[bool, str]]) -> None:
        """Every rank's (vote, reason) of a round in which one voted True: should_preempt()
        says True from now on, with the first such rank's reason."""
        with self._lock:
            if not self._preempt:
                self._preempt = True
                self._reason = next(r for a, r in answers if a)

    def acknowledge_preemption_signal(self) -> None:
        """Nothing to send: det's master asked the trial to stop, so a clean exit after
        should_preempt() said True is a stop it expects (paused, preempted or stopped by its
        searcher), not a completed trial."""


class DummyPreemptContext(PreemptContext):
    """should_preempt() is always False, with the calling rules of `preempt_mode` (every rank
    calls it in WorkersAskChief mode, the chief alone in ChiefOnly mode); for code run
    without a cluster (Determined's DummyPreemptContext)."""

    def __init__(self, dist: _distributed.DistributedContext,
                 preempt_mode: PreemptMode = PreemptMode.WorkersAskChief) -> None:
        super().__init__(_client.OffClusterClient(), dist, preempt_mode, on_cluster=False)

    def start(self) -> "PreemptContext":
        if self._started:
            raise RuntimeError("PreemptContext.start() was already called")
        self._started = True
        return self

    def close(self) -> None:
        pass

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if not self._started:
            raise RuntimeError("PreemptContext.should_preempt() before PreemptContext.start()")
        if self._mode == PreemptMode.ChiefOnly and self._dist.rank != 0:
            raise RuntimeError("should_preempt: PreemptMode.ChiefOnly: only the chief may call it "
                               f"(rank {self._dist.rank} did)")
        if self._mode == PreemptMode.WorkersAskChief:
            self._dist.broadcast(False)
        return False
