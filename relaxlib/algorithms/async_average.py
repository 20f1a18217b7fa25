"""Asynchronous model averaging (BAGUA's Async): a communication thread keeps averaging the
model copies while the training loop only ever applies local updates, never waiting for peers."""

from __future__ import annotations

import threading

from relaxlib import direct, perfmodel
from relaxlib.algorithms import modes
from relaxlib.algorithms.averaging import ModelAveraging
from relaxlib.algorithms.base import TrainingContext
from relaxlib.errors import RelaxError

# How long teardown waits for the averaging thread, whose waits fail once a lost rank is noted.
THREAD_STOP_S = 30.0


class AsyncModelAverage(ModelAveraging):
    """Every ``sync_interval_ms`` a background thread all-reduces a snapshot of the weights; the
    change ``mean - snapshot`` is added at the next ``optimizer.step()``, which otherwise applies
    this rank's own update only (keeping the local progress made meanwhile): a slow rank slows
    nobody's steps.

    ``pause()`` / ``resume()`` stop and restart the thread (collective: every rank calls them; the
    thread of each rank runs until all ranks paused, so the number of averaging rounds agrees);
    ``average_now()`` pauses and makes every model exactly the mean; ``optimizer.join()`` lets a
    rank that ran out of data stop while the others go on (``shutdown()``, also at exit, joins a
    rank that has not: a rank that finishes early keeps averaging there until all finished)."""

    name = "async_model_average"
    _join_serves = False

    def __init__(self, sync_interval_ms: float = 50.0) -> None:
        if not sync_interval_ms >= 0:
            raise ValueError(f"sync_interval_ms must be >= 0, got {sync_interval_ms}")
        self.sync_interval_ms = sync_interval_ms

    def setup(self, ctx: TrainingContext) -> None:
        super().setup(ctx)
        self._pending = None  # averaging change not yet added to the weights
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self.resume()

    def _loop(self) -> None:
        ctx = self._ctx
        try:
            while True:
                if self._active:
                    self._wake.wait(self.sync_interval_ms / 1000.0)
                with self._params_lock:  # the model as it will be once the pending change lands
                    snapshot = self._effective_params(ctx)
                handle = ctx.comm.allreduce_async(snapshot, f"{self.name}.model", average=True)
                still_active = ctx.comm.allreduce_scalar(1.0 if self._active else 0.0, f"{self.name}.active")
                mean = ctx.comm.wait(handle)
                ctx.math.add_(mean, snapshot, -1.0)  # this round's change
                with self._params_lock:
                    if self._pending is None:
                        self._pending = mean
                    else:
                        ctx.math.add_(self._pending, mean)
                self.averagings += 1
                if still_active == 0:  # every rank paused: all leave after the same round
                    return
        except BaseException as error:  # reported to the training loop by step()/pause()
            self._error = error

    def _effective_params(self, ctx: TrainingContext):
        flat = ctx.flatten_params(self._indices)
        if self._pending is not None:
            ctx.math.add_(flat, self._pending)
        return flat

    def _apply_pending(self, ctx: TrainingContext) -> None:
        """Adds the averaging rounds' change to the weights (in the training thread: never in the
        middle of a forward/backward pass, whose autograd graph holds the weights)."""
        with self._params_lock:
            if self._pending is not None:
                ctx.add_to_params(self._indices, self._pending)
                self._pending = None

    def _raise_thread_error(self) -> None:
        """Raises the averaging thread's failure in the training thread: a relaxlib error as its own
        class (a lost rank's ``ProcessFailedError`` is what ``hvd.elastic`` recovers from)."""
        if self._error is not None:
            error, self._error = self._error, None
            kind = type(error) if isinstance(error, RelaxError) else RuntimeError
            raise kind(f"{self.name}: the averaging thread failed: {error}") from error

    def teardown(self, ctx: TrainingContext) -> None:
        """Stops the averaging thread without a collective (after a lost rank its waits fail, so it
        ends by itself) and forgets its failure and the change it had not added yet."""
        thread, self._thread = self._thread, None
        self._active = False
        self._wake.set()
        if thread is not None:
            thread.join(THREAD_STOP_S)
            if thread.is_alive():
                raise RelaxError(f"{self.name}: the averaging thread did not stop within {THREAD_STOP_S:.0f} s "
                                 "after the world changed")
        self._error = None
        self._pending = None

    def traceable(self, ctx: TrainingContext) -> bool:
        """No: the averaging thread works on host copies of the weights between steps."""
        return False

    def splits_around_update(self, ctx: TrainingContext) -> bool:
        """Where the update replaces each parameter whole (TF variables): the averaging thread's
        snapshot may then see some parameters before and some after it, and each parameter's
        change ``mean - snapshot`` still keeps its own local progress. Where updates are in place
        (torch) the update must hold the lock the thread reads the weights under."""
        return ctx.updates_whole_parameters and not ctx.max_grad_norm

    def before_update(self, ctx: TrainingContext) -> None:
        """Reports a failure of the averaging thread."""
        self._raise_thread_error()

    def after_update(self, ctx: TrainingContext) -> None:
        """Adds the averaging rounds' change that arrived meanwhile."""
        self._apply_pending(ctx)
        self._last_step += 1

    def step(self, ctx: TrainingContext) -> None:
        self.before_update(ctx)
        with self._params_lock:
            self._local_update(ctx)
        self.after_update(ctx)

    def pause(self) -> None:
        """Collective: stops averaging once every rank paused (blocks until then)."""
        if self._thread is not None:
            self._active = False
            self._wake.set()
            self._thread.join()
            self._thread = None
        self._apply_pending(self._ctx)
        self._raise_thread_error()

    def resume(self) -> None:
        """Collective: (re)starts the averaging thread."""
        if self._thread is None:
            self._active = True
            self._wake.clear()
            self._thread = threading.Thread(target=self._loop, name="relaxlib-async-average", daemon=True)
            self._thread.start()

    def average_now(self) -> None:
        """Collective: pauses averaging and makes every model exactly the mean (``resume()`` to go on)."""
        self.pause()
        super().average_now()

    def join(self, ctx: TrainingContext) -> int:
        """This rank ran out of data: its model keeps being averaged until every rank joined.
        Returns the last step of any rank."""
        self._joined = True
        self.pause()  # (collective rounds: this rank still submits until every rank paused)
        return direct.serve_until_all_joined(self._last_step, lambda step: None, finishing=self._finishing)


modes.register(modes.Mode("async", kind="async", caveat="averages every sync interval, not every step",
                          build=AsyncModelAverage, predict=perfmodel.predict_async, position=40))
