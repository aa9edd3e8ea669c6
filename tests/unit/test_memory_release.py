"""``MemoryRelease`` trims once a wave has ended: held fell by ``after`` from its high point
and stopped falling; never while it still falls, never for a smaller dip, never when off."""

from __future__ import annotations

from a2a_gateway.observability import memory
from a2a_gateway.observability.memory import MemoryRelease


def _release(readings: list[int], after: int) -> tuple[MemoryRelease, list[bool], list[int]]:
    values = iter(readings)
    trimmed: list[int] = []
    release = MemoryRelease(lambda: next(values), after,
                            trim=lambda pad: trimmed.append(pad) or 1)
    return release, [release.check() for _ in readings], trimmed


def test_a_wave_that_ended_is_trimmed_once_at_its_end() -> None:
    release, checks, trimmed = _release([0, 500, 1200, 800, 300, 20, 20, 20, 25], after=1000)
    assert checks == [False, False, False, False, False, False, True, False, False]
    assert trimmed == [0] and release.trims == 1


def test_a_dip_smaller_than_after_and_a_falling_wave_are_not_trimmed() -> None:
    _, checks, trimmed = _release([1000, 400, 400, 2000, 1500, 900, 300], after=1000)
    assert not any(checks) and not trimmed


def test_the_next_wave_counts_from_the_last_trim() -> None:
    _, checks, _ = _release([1500, 100, 100, 900, 100, 100, 1300, 200, 200], after=1000)
    assert checks == [False, False, True, False, False, False, False, False, True]


def test_after_zero_never_trims() -> None:
    _, checks, trimmed = _release([5000, 0, 0, 0], after=0)
    assert not any(checks) and not trimmed


def test_the_c_library_is_looked_up_when_a_trim_is_first_due(monkeypatch) -> None:
    """Not at start-up: the look-up loads ``ctypes`` and runs ``ldconfig``."""
    lookups: list[int] = []
    monkeypatch.setattr(memory, "libc_malloc_trim", lambda: lookups.append(1) or (lambda pad: 1))
    values = iter([1500, 100, 100, 1500, 100, 100])
    release = MemoryRelease(lambda: next(values), 1000)
    assert [release.check(), release.check()] == [False, False] and lookups == []
    assert release.check() and lookups == [1]
    assert [release.check() for _ in range(3)] == [False, False, True] and release.trims == 2
