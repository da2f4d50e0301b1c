"""The generator's verification, batched like generation: the groups of one engine batch finish together, and one
call verifies them all on whichever verifier actor is free, whose workers then measure the problems' references and
check the candidates in parallel (one call per group would queue them behind each other on the actor, each waiting
for its reference). A verifier actor that dies is restarted by Ray and the call is made again on the new one."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from typing import Optional

from ray.exceptions import RayActorError

from drtriton_ray.rl.config import VerifySection
from drtriton_ray.rollout.sync import call_with_restarts
from drtriton_ray.verify.pool import first_copies
from drtriton_ray.verify.task import Task

log = logging.getLogger("drtriton.generator")


class VerifierQueue:
    """`counters`: where verify_calls, verify_copies and verifier_failures are counted."""

    def __init__(self, verifiers: list, verify: VerifySection, counters: Counter):
        self.verifiers, self.settings, self.counters = verifiers, verify, counters
        self._idle: Optional[asyncio.Queue] = None  # verifier actors not in a call
        self._waiting: deque[tuple[list[Task], asyncio.Future]] = deque()  # one entry per group
        self._arrived: Optional[asyncio.Event] = None
        self._calls: list[asyncio.Task] = []  # the dispatcher and its calls

    async def verify(self, tasks: list[Task]):
        """Verdicts in task order, from the next verifier call that takes them; None when no actor could answer."""
        if not tasks:
            return []
        if not self._calls:  # first use, or after stop()
            if self._idle is None:
                self._idle, self._arrived = asyncio.Queue(), asyncio.Event()
                for v in self.verifiers:
                    self._idle.put_nowait(v)
            self._calls = [asyncio.create_task(self._dispatch())]
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((tasks, done))
        self._arrived.set()
        return await done

    async def stop(self) -> None:
        """Cancel the dispatcher and the calls under way; the groups waiting are dropped (their prompts are)."""
        for t in self._calls:
            t.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)
        self._calls = []
        self._waiting.clear()

    async def _dispatch(self) -> None:
        """Whenever an actor is free: every group waiting (up to verify.batch_tasks candidates), in one call."""
        v = self.settings
        while True:
            while not self._waiting:
                self._arrived.clear()
                await self._arrived.wait()
            actor = await self._idle.get()
            try:
                await asyncio.sleep(v.batch_wait_s)  # the rest of an engine batch arrives within moments
            except asyncio.CancelledError:
                self._idle.put_nowait(actor)
                raise
            waiting, size = [], 0
            while self._waiting and (not waiting or size + len(self._waiting[0][0]) <= v.batch_tasks):
                waiting.append(self._waiting.popleft())
                size += len(waiting[-1][0])
            self.counters["verify_calls"] += 1
            self._calls = [t for t in self._calls if not t.done()]
            self._calls.append(asyncio.create_task(self._verify_on(actor, waiting)))

    async def _verify_on(self, actor, waiting: list[tuple[list[Task], asyncio.Future]]) -> None:
        tasks = [t for group, _ in waiting for t in group]
        # the pool checks a candidate once however many answers wrote it; those answers share its verdict
        self.counters["verify_copies"] += sum(i != j for i, j in enumerate(first_copies(tasks)))
        verdicts = None
        try:
            verdicts = await call_with_restarts(
                lambda: actor.verify.remote(tasks), lambda: self.counters.update(["verifier_failures"])
            )
        except RayActorError as e:
            log.warning("verifier unavailable: %s", e)
        except Exception as e:  # noqa: BLE001 - each prompt of the call fails as it would have alone
            for _, done in waiting:
                if not done.done():
                    done.set_exception(e)
            return
        finally:
            self._idle.put_nowait(actor)
        start = 0
        for group, done in waiting:
            if not done.done():
                done.set_result(None if verdicts is None else verdicts[start : start + len(group)])
            start += len(group)


def verify_spread(verifiers: list, tasks: list[Task]) -> list:
    """Blocking: `tasks` dealt over every verifier actor, verdicts back in task order (the held-out evaluation's
    `eval.policy.Verify`)."""
    import ray

    n = len(verifiers)
    parts = ray.get([v.verify.remote(tasks[i::n]) for i, v in enumerate(verifiers)])
    out: list = [None] * len(tasks)
    for i, part in enumerate(parts):
        out[i::n] = part
    return out
