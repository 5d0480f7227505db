"""Is the target training at all? Every walk asks first: a process that does not train gets no cause.

Launch mode: the agent's steps (an optimizer step or the end of backward()). Attach mode:
stack samples in backward or the optimizer (forward alone is a model being served). What
was seen instead is the reason given, so an inconclusive walk still says something.
"""

from __future__ import annotations

import time
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext

STEP_SIGNALS = {"o": "optimizer.step", "k": "backward()"}


# Forward samples with no backward it takes to call a process a model being served, not trained.
FORWARDS_TO_CALL_SERVED = 6
DENSE_LOOK_S, DENSE_LOOK_HZ = 3.0, 1000  # a short look for backward passes far shorter than a forward
EVALUATION_LOOK_S = 15.0  # how much longer forward-only samples are watched for a training step


@register
class TrainingActivity(Probe):
    id = "training.activity"
    title = "Is the target training: steps from the agent, or backward and optimizer frames in its stacks"
    needs = frozenset({NEEDS_PROCESS})
    reads_history = True
    params = {"wait": 10.0}
    values = {"trains": "", "seen_by": "", "steps_seen": "", "step_signal": "", "training_samples": "",
              "forward_samples": "", "samples": "", "seen": ""}

    def run(self, ctx: ProbeContext, wait: float = 10.0) -> Measurement:
        agent = ctx.target.agent
        conn = agent.primary() if agent is not None else None
        if conn is not None:
            return self._from_agent(ctx, conn, wait)
        if not ctx.target.alive():
            return self.cannot(ctx.target.gone_reason(), applicable=False)
        return self._from_stacks(ctx)

    def _from_agent(self, ctx: ProbeContext, conn: Any, wait: float) -> Measurement:
        started = time.monotonic()
        # The wait runs from the agent's connection: a launched job's walk has already watched it
        # for its first steps (session.wait_ready), and that watch is this one's evidence too.
        deadline = max(min(conn.connected_at + wait, started + ctx.budget_left), started)
        while conn.steps_total < 2 and time.monotonic() < deadline and ctx.target.alive():
            self.reading(ctx, elapsed=time.monotonic() - started, of=wait, status="waiting for a training step")
            if not ctx.sleep(0.25):
                break
        elapsed = time.monotonic() - started
        signals = list(conn.stream("loop", "signals").items)
        kinds = [s["boundary"] for s in signals if "boundary" in s]
        served = next((s["forwards_before_training"] for s in signals if s.get("forwards_before_training")), 0)
        values = {"trains": conn.steps_total >= 2, "seen_by": "agent", "steps_seen": conn.steps_total,
                  "step_signal": STEP_SIGNALS.get(kinds[-1], kinds[-1]) if kinds else None}
        provenance = "agent: optimizer step hooks and the end of backward()"
        if not values["trains"] and any("first_backward" in s for s in signals):
            # Gradients are computed: it trains, in steps longer than the wait (an LBFGS step runs
            # its closure, forward and backward, up to max_iter times).
            values["trains"] = True
            provenance += f"; backward() seen, {conn.steps_total} step(s) ended in {elapsed:.0f} s: long steps"
        died = conn.exception() if not ctx.target.alive() else None
        ran_out = any(e.get("event") == "oom" for e in conn.stream("memory", "events").items)
        if not values["trains"] and died and (conn.steps_total or ran_out):
            # It died training: in its first steps, or out of memory before its first step ended.
            values["trains"] = True
            provenance += f"; it ended with {died.get('type')} after {conn.steps_total} step(s)"
        if values["trains"]:
            return self.measurement(values=values, provenance=provenance, seconds=elapsed)
        seen = []
        if not conn.torch:
            seen.append("it has not imported torch")
        if served and not any("first_backward" in s for s in signals):
            seen.append(f"{served} forward passes and no backward")
        if conn.steps_total:
            seen.append(f"only {conn.steps_total} step")
        where = self._main_thread_now(ctx)
        if where:
            seen.append(f"the main thread is in {where}")
        values["seen"] = f"no optimizer step or backward() in {elapsed:.0f} s" + (f" ({'; '.join(seen)})" if seen else "")
        return self.measurement(values=values, provenance=provenance, seconds=elapsed)

    def _main_thread_now(self, ctx: ProbeContext) -> str | None:
        if ctx.measure is None or not ctx.target.alive():
            return None
        stacks = ctx.measure("stacks.sample", {})
        top = stacks.evidence.get("top_stacks") or [] if stacks.ok else []
        return str(top[0]["stack"]).split(" ← ")[0] if top else None

    def _from_stacks(self, ctx: ProbeContext) -> Measurement:
        assert ctx.measure is not None
        started = time.monotonic()
        windows = [ctx.measure("stacks.sample", {})]
        past_forwards = False  # a third look, for training after forward passes alone
        if windows[0].ok and self._counts(windows)[0] == 0 and ctx.target.alive():
            # No backward yet. A loop that waits for data 98% of the time shows its forward and
            # backward in a sample or two a second, or in none of a window's 120: look longer and
            # denser before calling it a model being served, or not training at all. At 50 Hz
            # (400 samples) a loop whose model is 0.5% of its step (2 ms of augmentation a sample)
            # showed neither in one of two acceptance runs; at 100 Hz it expects 4 model samples.
            windows.append(ctx.measure("stacks.sample", {"seconds": 8.0, "rate": 100}))
            training, forward, _ = self._counts([w for w in windows if w.ok])
            if not training and forward >= FORWARDS_TO_CALL_SERVED and ctx.target.alive():
                # A backward need not take as long as its forward: a loop that sleeps 2 ms a sample
                # spent 16x longer in its forward (the intra-op threads waking) than in its 0.05 ms
                # backward, and 1066 samples at up to 100 Hz saw none in one of three acceptance
                # runs. A short dense look sees steps that short (16 backward samples in 3 s).
                self.reading(ctx, status="forward passes and no backward: a dense look for a short backward")
                windows.append(ctx.measure("stacks.sample", {"seconds": DENSE_LOOK_S, "rate": DENSE_LOOK_HZ}))
                training, forward, _ = self._counts([w for w in windows if w.ok])
            if not training and forward >= FORWARDS_TO_CALL_SERVED and ctx.target.alive() \
                    and ctx.budget_left > EVALUATION_LOOK_S + 10:
                # Forward after forward and no backward: a model being served, or a training job
                # in one of its evaluations (nanoGPT's at iteration 0 and every few hundred).
                # An evaluation ends; a server does not. One more, sparse look before saying so.
                self.reading(ctx, status="forward passes and no backward: looking for a training step "
                                           f"for {EVALUATION_LOOK_S:.0f} s more (an evaluation ends)")
                windows.append(ctx.measure("stacks.sample", {"seconds": EVALUATION_LOOK_S, "rate": 10}))
                past_forwards = True
        usable = [w for w in windows if w.ok]
        if not usable:
            return self.cannot(f"stack samples needed: {windows[0].unavailable}", seconds=time.monotonic() - started)
        training, forward, samples = self._counts(usable)
        values = {"trains": training > 0, "seen_by": "stack samples", "training_samples": training,
                  "forward_samples": forward, "samples": samples}
        seconds = sum(w.seconds for w in usable)
        provenance = "py-spy: main-thread samples in backward or the optimizer"
        if training:
            if past_forwards and ctx.forget is not None:
                # Trains, but the walk's window was taken in an evaluation: the nodes after this
                # one judge a window of training steps, not of the evaluation.
                ctx.forget("stacks.sample")
                provenance += "; the first windows were an evaluation (forward passes only): measured again"
            return self.measurement(values=values, provenance=provenance, seconds=time.monotonic() - started)
        if 0 < forward < FORWARDS_TO_CALL_SERVED:
            # A backward takes about as long as its forward: with this few forwards seen, a missing
            # backward is chance, not evidence (a loop whose batches cost 500x its model work: 3
            # forwards in 999 samples at 100 Hz, no backward). A model being served shows its
            # forward in a large share of samples (157 of 400 on the zoo's server).
            values["trains"] = True
            return self.measurement(values=values, seconds=time.monotonic() - started, provenance=(
                f"py-spy: {forward} forward pass sample(s) in {samples} and no backward: the model's work is too "
                "rare a part of the loop for a backward to show, so it is walked as training (launch mode sees "
                "each step)"))
        top = usable[-1].evidence.get("top_stacks") or []
        where = f"; the main thread is mostly in {top[0]['stack'].split(' ← ')[0]}" if top else ""
        what = "forward only: a model being served, not trained" if forward else "no forward or backward"
        values["seen"] = f"{what} in {samples} samples over {seconds:.0f} s{where}"
        return self.measurement(values=values, provenance=provenance, seconds=time.monotonic() - started)

    @staticmethod
    def _counts(windows: list[Measurement]) -> tuple[int, int, int]:
        training = forward = samples = 0
        for w in windows:
            n = w.values.get("samples") or 0
            samples += n
            train_share = (w.values.get("backward_fraction") or 0) + (w.values.get("optimizer_fraction") or 0)
            forward_share = w.values.get("forward_fraction") or 0
            # A share above zero is at least one sample, however it was rounded.
            training += max(round(train_share * n), 1) if train_share > 0 else 0
            forward += max(round(forward_share * n), 1) if forward_share > 0 else 0
        return training, forward, samples
