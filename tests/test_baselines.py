"""The prefill-first baseline (vLLM v0's order) really stalls decodes, and loses nothing."""

from __future__ import annotations

from densegate.impl import Engine, EngineConfig, GateConfig, PrefillGate
from densegate.lab.baselines.policies import LegacyPolicy
from densegate.lab.baselines.prefill_first import PrefillFirstScheduler


def _cfg(**kw: object) -> EngineConfig:
    base: dict[str, object] = dict(
        max_num_seqs=4, max_num_batched_tokens=32, block_size=4, num_blocks=64,
        max_model_len=32, enable_chunked_prefill=False, gate_enabled=False,
    )  # fmt: skip
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def test_prefill_passes_run_no_decodes() -> None:
    cfg = _cfg()
    eng = Engine(cfg, gate=LegacyPolicy(cfg.gate_config()), scheduler=PrefillFirstScheduler)
    a = eng.add_request([1] * 5, 6)
    eng.step()  # prefill a: first token
    eng.step()  # decode a
    eng.add_request([2] * 7, 3)
    eng.step()  # prefill b: a waits
    rec = eng.scheduler.pass_log[-1]
    assert rec.prefill_tokens == 7 and rec.decode_seqs == 0 and rec.stalled_decodes == 1
    assert rec.interrupts_decode
    assert len(eng.request(a).output_token_ids) == 2
    while eng.has_unfinished():
        eng.step()
        eng.scheduler.check_invariants()
    assert eng.scheduler.blocks.num_free == 64


def test_decode_first_scheduler_never_stalls() -> None:
    cfg = _cfg()
    eng = Engine(cfg, gate=LegacyPolicy(cfg.gate_config()))
    eng.add_request([1] * 5, 6)
    eng.step()
    eng.add_request([2] * 7, 3)
    eng.step()
    rec = eng.scheduler.pass_log[-1]
    # The core scheduler has no notion of stalled decodes: its record has no such field.
    assert rec.prefill_tokens == 7 and rec.decode_seqs == 1 and rec.interrupts_decode
    assert not hasattr(rec, "stalled_decodes")


def test_a_holding_gate_gets_the_decode_pass() -> None:
    cfg = _cfg(gate_enabled=True, dense_tokens=30, max_hold_passes=3)
    eng = Engine(cfg, gate=PrefillGate(GateConfig(30, 3)), scheduler=PrefillFirstScheduler)
    a = eng.add_request([1] * 5, 8)
    eng.step()  # nothing decodes yet: NO_DECODE fires
    eng.add_request([2] * 4, 2)
    eng.step()
    rec = eng.scheduler.pass_log[-1]
    assert rec.reason.name == "HOLD" and rec.prefill_tokens == 0 and rec.decode_seqs == 1
    assert len(eng.request(a).output_token_ids) == 2
    while eng.has_unfinished():
        eng.step()
    assert [m.output_tokens for m in eng.all_metrics()] == [8, 2]
