"""The one wake-up relay the background loops share (wakeups.Wakeup): a hub signal wakes the
loop at once, is taken, and nothing is relayed once the loop has left. No test waits on a
clock: each answer is due at once (a timeout of 0, or an event already set), and a broken relay
shows as the one-hour poll below hitting the deadline."""

from __future__ import annotations

import asyncio

from jobgate import wakeups

HOUR_S = 3600.0  # a poll interval no test may sit through: only a signal ends the wait


async def _sleep_with_deadline(wake: wakeups.Wakeup) -> bool:
    return await asyncio.wait_for(wake.sleep(HOUR_S), 5)


async def test_a_hub_signal_wakes_the_loop_and_is_taken() -> None:
    hub = wakeups.ChangeHub()
    wake = wakeups.Wakeup()
    with hub.watch_work() as work:
        async with wake.relaying(work):
            hub.work_available()
            assert await _sleep_with_deadline(wake) is True
            assert not work.is_set()  # the relay took the signal
            assert not wake.is_set()  # and the wake-up is cleared for the next pass


async def test_every_signal_given_is_relayed() -> None:
    hub = wakeups.ChangeHub()
    wake = wakeups.Wakeup()
    with hub.watch_reconcile() as due, hub.watch_outbox() as grown:
        async with wake.relaying(due, grown):
            hub.reconcile_due()
            assert await _sleep_with_deadline(wake) is True
            hub.outbox_available()
            assert await _sleep_with_deadline(wake) is True


async def test_a_set_before_the_sleep_answers_at_once() -> None:
    wake = wakeups.Wakeup()
    wake.set()  # e.g. request_stop() while the loop was busy
    assert await wake.sleep(HOUR_S) is True
    assert not wake.is_set()


async def test_a_sleep_with_nothing_to_wake_it_times_out() -> None:
    wake = wakeups.Wakeup()
    assert await wake.sleep(0) is False


async def test_nothing_is_relayed_after_the_loop_left() -> None:
    hub = wakeups.ChangeHub()
    wake = wakeups.Wakeup()
    with hub.watch_work() as work:
        async with wake.relaying(work):
            pass
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "wake-up relay"]
        work.set()
        await asyncio.sleep(0)
        assert not wake.is_set()
        assert work.is_set()  # left for no one to take


async def test_the_relay_ends_when_the_loop_fails() -> None:
    hub = wakeups.ChangeHub()
    wake = wakeups.Wakeup()
    with hub.watch_work() as work:
        try:
            async with wake.relaying(work):
                raise RuntimeError("loop crashed")
        except RuntimeError:
            pass
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "wake-up relay"]
