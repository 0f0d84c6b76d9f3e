"""The engine's threading model (issue 34): add_request and abort from any thread, or mid-pass.

Before it, ``abort()`` while a pass was in the runner freed a request of the batch
in flight: the next ``step()`` raised ``KeyError``, the pass's other request stayed
RUNNING with nothing to run and a KV block leaked; ``generate()`` from inside the
runner hung. Now such calls are queued and taken at the pass boundary
(``densegate.impl.inbox``), and a call that runs passes from inside one, or beside
another thread's, raises ``EngineBusy``.

The stateful test runs a client thread that adds and aborts at random while the
main thread steps and the runner itself adds, aborts, tries to re-enter and fails
at random; every request must be reported ended exactly once, as it should have
ended, and every KV block must come back. Its twin applies the queue mid-pass, as
the engine used to, and sees the check fail.
"""

from __future__ import annotations

import random
import sys
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from densegate.impl import Engine, EngineConfig, NullRunner, RequestOutput, RequestStatus
from densegate.impl.engine import EngineBusy
from densegate.impl.inbox import Inbox
from densegate.impl.sched.batch import ScheduledBatch
from densegate.impl.sched.failures import PassFailed

VOCAB = 8
MAX_LEN = 16


class _Callback(NullRunner):
    """Runs ``during(batch)`` inside each pass, then returns the null runner's tokens."""

    def __init__(self) -> None:
        super().__init__(token=1)
        self.config = type("Vocab", (), {"vocab_size": VOCAB})()
        self.eng: Engine | None = None
        self.during = lambda batch: None
        self.batches: list[ScheduledBatch] = []

    def execute(self, batch: ScheduledBatch) -> list[int]:
        self.batches.append(batch)
        self.during(batch)
        return list(super().execute(batch))


def _engine(**kw: int | bool) -> tuple[Engine, _Callback]:
    runner = _Callback()
    eng = Engine(EngineConfig(max_model_len=MAX_LEN, **kw), runner=runner)  # type: ignore[arg-type]
    runner.eng = eng
    return eng, runner


def _run(eng: Engine) -> dict[str, RequestOutput]:
    ended: dict[str, RequestOutput] = {}
    for _ in range(1000):
        if not eng.has_unfinished():
            break
        for out in eng.step():
            if out.finished:
                assert out.request_id not in ended, f"{out.request_id!r} ended twice"
                ended[out.request_id] = out
    assert not eng.has_unfinished()
    return ended


def _all_back(eng: Engine) -> None:
    sched = eng.scheduler
    sched.check_invariants()
    assert not sched.running and not sched.waiting
    assert sched.blocks.num_free == eng.config.num_blocks


# -- the audited case, and each rule on its own -----------------------------------------
def test_abort_inside_a_pass_is_taken_when_the_pass_ends() -> None:
    eng, runner = _engine()
    a, b = eng.add_request([1, 2, 3], 4), eng.add_request([1, 2, 3], 4)
    eng.step()  # both prefilled
    took: list[bool] = []
    runner.during = lambda batch: took.append(eng.abort(a)) if not took else None
    outs = {o.request_id: o for o in eng.step()}  # a decodes in this pass, then ends
    assert took == [True] and not eng.abort(a)
    assert outs[a].status is RequestStatus.ABORTED and outs[a].finished
    assert outs[a].new_token_ids == [1]  # the token its last pass sampled is kept
    assert outs[b].status is RequestStatus.RUNNING
    ended = _run(eng)
    assert ended[b].status is RequestStatus.FINISHED and len(ended[b].output_token_ids or []) == 4
    assert a not in ended
    _all_back(eng)


def test_add_inside_a_pass_joins_the_next_pass() -> None:
    eng, runner = _engine()
    eng.add_request([1, 2], 2)
    added: list[str] = []
    runner.during = lambda batch: added.append(eng.add_request([3, 4], 2)) if not added else None
    eng.step()
    (rid,) = added
    first = runner.batches[0]
    assert eng.request(rid).status is RequestStatus.WAITING
    assert eng.request(rid).seq_id not in {c.seq_id for c in first.prefills}
    assert eng.request(rid).arrival_pass == first.index + 1
    assert _run(eng)[rid].status is RequestStatus.FINISHED
    _all_back(eng)


@pytest.mark.parametrize("call", ["step", "plan", "generate", "execute"])
def test_running_a_pass_from_inside_one_is_refused(call: str) -> None:
    eng, runner = _engine()
    rid = eng.add_request([1, 2, 3], 3)
    stale = eng.plan()  # step() plans anew; execute() is refused before it looks at this
    seen: list[BaseException] = []

    def reenter(batch: ScheduledBatch) -> None:
        before = len(eng.all_metrics())
        with pytest.raises(EngineBusy) as e:
            if call == "execute":
                eng.execute(stale, eng.scheduler.decide(stale))
            elif call == "generate":
                eng.generate([[5, 6]], 2)
            else:
                getattr(eng, call)()
        assert len(eng.all_metrics()) == before  # generate added nothing
        seen.append(e.value)

    runner.during = reenter
    assert _run(eng)[rid].status is RequestStatus.FINISHED
    assert seen and all(str(x).startswith(f"Engine.{call}() called from inside") for x in seen)
    _all_back(eng)


def test_running_passes_beside_another_thread_is_refused() -> None:
    eng, runner = _engine()
    rid = eng.add_request([1, 2, 3], 3)
    inside, release = threading.Event(), threading.Event()
    runner.during = lambda batch: (inside.set(), release.wait(60))
    outs: list[RequestOutput] = []
    driver = threading.Thread(target=lambda: outs.extend(eng.step()))
    driver.start()
    try:
        assert inside.wait(60)
        with pytest.raises(EngineBusy, match=r"Engine\.step\(\) called while another thread"):
            eng.step()
        assert eng.abort(rid)  # any thread may abort, and is not kept waiting
    finally:
        release.set()
        driver.join()
    (out,) = (o for o in outs if o.finished)  # taken when the driver's pass ended
    assert out.request_id == rid and out.status is RequestStatus.ABORTED
    assert not eng.has_unfinished()
    _all_back(eng)


# -- the stateful test: a client thread, a runner that calls back, random failures --------
class _Ledger:
    """What the callers did: ids added (and how each should end), aborts taken."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[str] = []
        self.inadmissible: set[str] = set()
        self.aborts: Counter[str] = Counter()  # abort() returned True
        self.limits: dict[str, int] = {}
        self.reached: Counter[str] = Counter()

    def add(self, eng: Engine, rng: random.Random, caller_id: str | None) -> None:
        n = rng.choice([0, 1, 2, 3, 5, 8, MAX_LEN])  # 0 and MAX_LEN: never admissible
        most = rng.choice([1, 2, 3, 6])
        rid = eng.add_request([2] * n, most, request_id=caller_id)
        with self.lock:
            assert rid not in self.ids, f"id {rid!r} handed out twice"
            self.ids.append(rid)
            self.limits[rid] = most
            if eng.rejection([2] * n, most) is not None:
                self.inadmissible.add(rid)

    def abort(
        self, eng: Engine, rng: random.Random, where: str, batch: ScheduledBatch | None = None
    ) -> None:
        """Abort an id drawn from all added, or, given ``batch``, from those it runs."""
        with self.lock:
            ids = self.ids
            if batch is not None:
                seqs = {c.seq_id for c in (*batch.prefills, *batch.decodes)}
                ids = [rid for rid in ids if eng.request(rid).seq_id in seqs]
            if not ids:
                return
            rid = rng.choice(ids)
        if eng.abort(rid):
            with self.lock:
                self.aborts[rid] += 1
                self.reached[f"abort taken {where}"] += 1


def _client(
    eng: Engine, book: _Ledger, seed: int, mid: threading.Event, acted: threading.Event
) -> None:
    rng = random.Random(seed)
    own: list[str] = []
    for i in range(rng.randint(150, 250)):
        if rng.random() < 0.3:  # wait for a pass to ask: this call lands inside it
            while not mid.wait(0.005) and eng.has_unfinished():
                pass
        in_pass = mid.is_set()
        what = rng.random()
        if what < 0.45:
            book.add(eng, rng, None)
        elif what < 0.55:
            rid = f"c{i}"
            book.add(eng, rng, rid)
            own.append(rid)
        elif what < 0.6 and own:
            with pytest.raises(ValueError, match="already in use"):
                eng.add_request([1], 1, request_id=rng.choice(own))
        elif what < 0.65:
            with pytest.raises(KeyError):
                eng.abort("never added")
        else:
            book.abort(eng, rng, "by the client")
        if in_pass:
            book.reached["client call mid-pass"] += 1
            mid.clear()
            acted.set()


def _scenario(seed: int, client: bool = True) -> _Ledger:
    rng = random.Random(seed)
    seqs, block, chunked = rng.randint(1, 4), rng.choice([1, 2, 4]), rng.random() < 0.5
    per_seq = -(-MAX_LEN // block)
    eng, runner = _engine(
        max_num_seqs=seqs,
        max_num_batched_tokens=rng.randint(max(seqs, 1 if chunked else MAX_LEN), MAX_LEN + 8),
        block_size=block,
        num_blocks=rng.randint(per_seq, 3 * per_seq),  # tight: preemptions
        enable_chunked_prefill=chunked,
        gate_enabled=rng.random() < 0.7,
        runner_retries=rng.randint(0, 2),
    )
    book, failed_aborts = _Ledger(), set[str]()
    mid, acted, done = threading.Event(), threading.Event(), threading.Event()

    def during(batch: ScheduledBatch) -> None:
        eng.scheduler.check_invariants()  # here, where the pass holds the engine
        what = rng.random()
        if what < 0.15:
            book.add(eng, rng, None)
        elif what < 0.35:
            book.abort(eng, rng, "inside a pass", batch if rng.random() < 0.5 else None)
        elif what < 0.4:
            with pytest.raises(EngineBusy):
                eng.step()
            book.reached["re-entry refused"] += 1
        elif what < 0.5:
            raise RuntimeError("injected runner failure")
        if client and not done.is_set() and rng.random() < 0.5:
            acted.clear()
            mid.set()  # the client's next call lands inside this pass
            acted.wait(5)  # a guard: the client acts at once, or has just ended

    runner.during = during
    for _ in range(rng.randint(3, 8)):
        book.add(eng, rng, None)
    worker = None
    if client:
        args = (eng, book, seed + 1, mid, acted)
        worker = threading.Thread(target=lambda: (_client(*args), done.set()), daemon=True)
        worker.start()
    ended: Counter[str] = Counter()
    outcome: dict[str, RequestOutput] = {}
    passes = 0
    while passes < 100_000:
        if worker is not None and not worker.is_alive() and not done.is_set():
            raise AssertionError("the client thread failed")  # its assertion, printed above
        client_done = worker is None or done.is_set()  # before: its last call counts
        if not eng.has_unfinished():
            if client_done:
                break
            done.wait(0.001)
            continue  # idle until the client adds or ends
        passes += 1
        try:
            outs = eng.step()
        except PassFailed as e:
            failed_aborts.update(e.aborted)
            continue
        for o in outs:
            if o.finished:
                ended[o.request_id] += 1
                outcome[o.request_id] = o
        if worker is None or done.is_set():  # else the client may be applying an add
            stuck = [r for r in eng.scheduler.running if r.num_computed >= r.num_tokens]
            assert not stuck, f"running with nothing to run: {stuck}"
    else:
        raise AssertionError("the engine never drained")
    assert ended == Counter(book.ids), "not every request was reported ended exactly once"
    assert max(book.aborts.values(), default=0) <= 1, "an abort was taken twice"
    for rid, out in outcome.items():
        assert out.reason, f"{rid!r} ended {out.status.name} without a reason"
        if rid in book.inadmissible:
            assert out.status is RequestStatus.REJECTED
        elif out.status is RequestStatus.FINISHED:
            assert len(out.output_token_ids or ()) == book.limits[rid]
        else:
            assert out.status is RequestStatus.ABORTED
            assert rid in book.aborts or rid in failed_aborts, f"{rid!r} aborted unasked"
    _all_back(eng)
    return book


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads often, so the client's calls also land at arbitrary points."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("fast_switching")
def test_a_client_thread_adding_and_aborting_at_random() -> None:
    reached: Counter[str] = Counter()
    for seed in range(8):
        try:
            reached += _scenario(seed).reached
        except AssertionError as e:
            raise AssertionError(f"seed {seed}: {e}") from e
    # Not vacuous: calls landed inside passes, from the client and from the runner.
    wanted = ("client call mid-pass", "abort taken inside a pass", "re-entry refused")
    assert all(reached[w] for w in wanted), reached


@pytest.mark.parametrize("seed", range(4))
def test_the_check_catches_the_queue_applied_mid_pass(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twin: the queue applied at once even mid-pass, as abort() used to: caught."""
    monkeypatch.setattr(Inbox, "flush", Inbox.drain)
    with pytest.raises((AssertionError, KeyError, ValueError)):
        _scenario(seed, client=False)
