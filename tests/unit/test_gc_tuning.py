"""``cli.tune_gc_for_serving``: what is alive is frozen, the youngest generation's
threshold is the setting's, the older generations' stay Python's."""

from __future__ import annotations

import gc

from a2a_gateway.cli import tune_gc_for_serving
from a2a_gateway.settings import GatewaySettings


def test_tuning_freezes_what_is_alive_and_sets_the_young_threshold():
    before = gc.get_threshold()
    alive = [object() for _ in range(10)], {"kept": []}
    try:
        tune_gc_for_serving(GatewaySettings().gc_young_threshold)
        assert gc.get_threshold() == (10_000, before[1], before[2])
        assert gc.get_freeze_count() > 0
        assert all(o is not alive[1] for o in gc.get_objects())  # frozen: out of every generation
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_tuning_collects_the_young_generations_before_the_freeze(monkeypatch):
    collected: list[tuple[int, ...]] = []
    monkeypatch.setattr(gc, "collect", lambda *generation: collected.append(generation) or 0)
    before = gc.get_threshold()
    try:
        tune_gc_for_serving(GatewaySettings().gc_young_threshold)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert collected == [(1,)]  # not a full collection over every imported object

