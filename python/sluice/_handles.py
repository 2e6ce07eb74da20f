"""What a save returns: SaveHandle for an eager save, LazySaveHandle for a
lazy one (snapshot="lazy"). Both answer the same questions (staged,
wait_staged, when_staged, wait_seconds), so callers ask, never test the
type."""


class SaveHandle:
    """A save in progress. The tensors passed to save() may change as soon as
    save() returned; wait() blocks until the checkpoint is durable and
    committed (and re-raises why it failed, if it did)."""

    def __init__(self, handle):
        self._handle = handle
        self._peer = None  # with peer replicas: the save's replication (sluice._peer)

    @property
    def stall_seconds(self):
        """How long save() blocked the caller (the snapshot into staging)."""
        return self._handle.stall_seconds

    def done(self):
        """True once every tier committed the checkpoint, or it failed."""
        return self._handle.done()

    def wait(self, tier=None):
        """Waits for every tier (or only `tier`, 0 = the fastest) to commit."""
        if tier is None:
            self._handle.wait()
        else:
            self._handle.wait_tier(tier)
        return self

    def wait_safe(self, timeout=None):
        """With peer replicas (doc/peer.md): waits until the step is safe,
        its peer commit held in peer_replicas + 1 failure domains, which
        does not wait for the durable tier. Raises UnavailableError saying
        why it is not safe (the save may still become durable: wait()), and
        ValueError for a save without peer replicas."""
        if self._peer is None:
            raise ValueError("sluice: this save has no peer replicas (sluice.configure(tier0_per_host=True, "
                             "peer_replicas=1), then a multi-process DCP save)")
        self._peer.wait(timeout)
        return self

    @property
    def safe(self):
        """True once the step is safe (peer replicas); False before, or without them."""
        return self._peer is not None and self._peer.done() and self._peer.error is None

    def progress(self):
        """Per tier: uri, state, durable_seconds, bytes_written, attempts, error."""
        return self._handle.progress()

    def stats(self):
        """What this rank saved, once the fastest tier committed (zeros before):
        bytes, items, chunks, objects written, and referenced_bytes, the bytes
        an incremental save found unchanged in base_step and referenced there
        instead of writing them (base_step None when there were none)."""
        return self._handle.stats()

    def backlog(self):
        """Per tier, the pipeline's backlog now: uri, steps (committed on a
        faster tier and due on this one: draining, waiting, or retrying after
        a failure; for tier 0, snapshotted and not yet written), their bytes,
        and superseded (steps the tier's backlog policy skipped for a newer
        one since the pipeline opened)."""
        return self._handle.backlog()

    @property
    def durable_seconds(self):
        """Seconds from the start of save() to the commit on the fastest tier
        (0 until then)."""
        return self._handle.progress()[0]["durable_seconds"]

    # What a lazy save (LazySaveHandle) finishes later, an eager one has
    # done by the time save() returns: callers ask these, never the type.
    @property
    def staged(self):
        """True once every tensor is in staging (an eager save: at once)."""
        return True

    @property
    def wait_seconds(self):
        """How long the trainer blocked for this save after save() returned
        (an eager save: never)."""
        return 0.0

    def wait_staged(self):
        """Waits until every tensor of the save is in staging (an eager
        save: they are)."""
        return self

    def when_staged(self, callback):
        """Calls callback() once staged (an eager save: now)."""
        callback()

    def __repr__(self):
        states = ", ".join(p["state"] for p in self._handle.progress())
        return (f"<sluice.SaveHandle {self._handle.name}@{self._handle.step} "
                f"stall={self.stall_seconds:.3f}s tiers=[{states}]>")


class LazySaveHandle(SaveHandle):
    """A lazy save (snapshot="lazy"): save() returned before the large
    tensors were copied. An optimizer's step waits for the tensors it owns
    on its own (a pre-hook); change any other saved tensor in place only
    after wait_staged(). wait() finishes the copy first."""

    def __init__(self, save, handle, stall):
        super().__init__(handle)
        self._save = save
        self._stall = stall

    @property
    def stall_seconds(self):
        """How long save() blocked the caller (the small tensors' copy)."""
        return self._stall

    @property
    def wait_seconds(self):
        """How long optimizer pre-hooks and wait_staged() blocked the
        trainer for this save so far: with stall_seconds, the trainer's
        whole stall."""
        return self._save.wait_seconds

    @property
    def staged(self):
        """True once every tensor is in staging and the copy was checked."""
        return self._save.finished

    @property
    def staged_seconds(self):
        """Seconds from save() to the end of the copy (0 before)."""
        lazy = self._save.lazy
        return self._save.copy_seconds if lazy is None else lazy.copy_seconds

    def wait_staged(self):
        """Waits until every tensor of the save is in staging: from then on
        any of them may change."""
        self._save.wait_staged()
        return self

    def when_staged(self, callback):
        """Calls callback() once staged (on the finishing thread, or now)."""
        self._save.when_staged(callback)

    def wait(self, tier=None):
        self._save.finish()
        return super().wait(tier)
