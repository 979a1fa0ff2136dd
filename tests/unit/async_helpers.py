"""Helpers for async unit tests that run on a FakeClock: they move the event loop, never real time."""

from __future__ import annotations

from collections.abc import Callable

import anyio.lowlevel


async def settle(rounds: int = 30) -> None:
    """Pass through the event loop ``rounds`` times, so every task woken so far runs until it blocks again."""
    for _ in range(rounds):
        await anyio.lowlevel.checkpoint()


async def until(predicate: Callable[[], bool], rounds: int = 2000) -> None:
    """Pass through the event loop until ``predicate()`` holds; fail after ``rounds`` passes."""
    for _ in range(rounds):
        if predicate():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError(f"condition still false after {rounds} passes through the event loop")
