"""Classifying py-spy stacks, and parse_raw + stack_values end to end on hand-built raw lines."""

from __future__ import annotations

import os

import pytest

from fieldguide.probes.stack_categories import (
    ANOMALY,
    BACKWARD,
    COLLECTIVE,
    DATA_WAIT,
    DEVICE_SYNC,
    FORWARD,
    IO,
    LOCK_WAIT,
    OPTIMIZER,
    OTHER,
    PRODUCE,
    PROFILER,
    SLEEP,
    STARTUP,
    WORKER_IDLE,
    ThreadSample,
    classify_call,
    classify_main,
    classify_worker,
    summarize,
)
from fieldguide.probes.stacks import (
    MIN_PRODUCE_SAMPLES,
    SourceReader,
    parse_raw,
    stack_values,
    statement_spans,
)

MAIN_PID = 100
PROC = f'process {MAIN_PID}:"python train.py"'

# Frames as py-spy's raw format writes them: `function (file:line)`, root first.
MODULE = "<module> (train.py:10)"
NEXT = "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725)"
MP_NEXT_DATA = "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1458)"
SP_NEXT_DATA = "_SingleProcessDataLoaderIter._next_data (torch/utils/data/dataloader.py:764)"
WAIT_FOR_BATCH = [NEXT, MP_NEXT_DATA,
                  "_MultiProcessingDataLoaderIter._get_data (torch/utils/data/dataloader.py:1410)",
                  "_MultiProcessingDataLoaderIter._try_get_data (torch/utils/data/dataloader.py:1243)",
                  "Queue.get (multiprocessing/queues.py:113)", "Connection.poll (multiprocessing/connection.py:257)",
                  "wait (multiprocessing/connection.py:1136)", "BaseSelector.select (selectors.py:415)"]
PRODUCE_IN_MAIN = [NEXT, SP_NEXT_DATA,
                   "_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:52)",
                   "<listcomp> (torch/utils/data/_utils/fetch.py:52)",
                   "DecodeDataset.__getitem__ (train.py:31)", "decode (train.py:22)"]
STARTUP_MAIN = ["DataLoader.__iter__ (torch/utils/data/dataloader.py:491)",
                "DataLoader._get_iterator (torch/utils/data/dataloader.py:422)",
                "_MultiProcessingDataLoaderIter.__init__ (torch/utils/data/dataloader.py:1146)",
                "BaseProcess.start (multiprocessing/process.py:121)",
                "Popen.__init__ (multiprocessing/popen_fork.py:19)"]
SAVE = ["train (train.py:60)", "save (torch/serialization.py:944)",
        "_save (torch/serialization.py:1200)", "Pickler.dump (pickle.py:487)"]
FORWARD_STACK = ["Module._wrapped_call_impl (torch/nn/modules/module.py:1736)",
                 "Module._call_impl (torch/nn/modules/module.py:1747)", "Net.forward (train.py:40)",
                 "Module._wrapped_call_impl (torch/nn/modules/module.py:1736)",
                 "Module._call_impl (torch/nn/modules/module.py:1747)",
                 "Linear.forward (torch/nn/modules/linear.py:125)"]
ANOMALY_STACK = FORWARD_STACK + ["format_stack (traceback.py:213)", "extract_stack (traceback.py:227)",
                                 "StackSummary.extract (traceback.py:383)", "getline (linecache.py:30)"]
BACKWARD_STACK = ["Tensor.backward (torch/_tensor.py:581)", "backward (torch/autograd/__init__.py:347)",
                  "_engine_run_backward (torch/autograd/graph.py:825)"]
OPTIMIZER_STACK = ["wrapper (torch/optim/optimizer.py:487)", "_use_grad (torch/optim/optimizer.py:91)",
                   "SGD.step (torch/optim/sgd.py:123)", "sgd (torch/optim/sgd.py:298)"]
PROFILER_STACK = ["profile.__exit__ (torch/autograd/profiler.py:434)", "_parse_kineto_results (torch/autograd/profiler.py:560)"]

# A forked worker still shows the parent's frames down to the fork.
FORK = [MODULE, *STARTUP_MAIN[:4], "Popen.__init__ (multiprocessing/popen_fork.py:19)",
        "Popen._launch (multiprocessing/popen_fork.py:71)",
        "BaseProcess._bootstrap (multiprocessing/process.py:314)",
        "BaseProcess.run (multiprocessing/process.py:108)",
        "_worker_loop (torch/utils/data/_utils/worker.py:349)"]
WORKER_PRODUCE = ["_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:52)",
                  "<listcomp> (torch/utils/data/_utils/fetch.py:52)", "RemoteDataset.__getitem__ (train.py:31)",
                  "sleep (time.py:1)"]
WORKER_IDLE_STACK = ["Queue.get (multiprocessing/queues.py:113)", "Connection.poll (multiprocessing/connection.py:257)"]
WORKER_INIT = ["open_index (train.py:12)", "load (json/__init__.py:293)"]


def frames(raw: list[str]) -> list[tuple[str, str]]:
    """`func (file:line)` strings -> the (function, file) pairs the classifiers take."""
    out = []
    for text in raw:
        func, _, rest = text.rpartition(" (")
        out.append((func, rest.rstrip(")").rsplit(":", 1)[0]))
    return out


def main_line(stack: list[str], count: int, thread: str = "MainThread", tid: int = MAIN_PID) -> str:
    return f"{PROC};thread ({tid}): {thread};" + ";".join([MODULE, *stack]) + f" {count}"


def worker_line(pid: int, below_loop: list[str], count: int) -> str:
    return (f'{PROC};process {pid}:"python train.py";thread ({pid}): MainThread;'
            + ";".join([*FORK, *below_loop]) + f" {count}")


# --- classify_main ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("stack", "category"), [
    (WAIT_FOR_BATCH, DATA_WAIT),
    (PRODUCE_IN_MAIN, PRODUCE),
    ([NEXT, SP_NEXT_DATA, "_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:54)",
      "default_collate (torch/utils/data/_utils/collate.py:398)"], PRODUCE),
    (STARTUP_MAIN, STARTUP),
    (SAVE, IO),
    (["log (train.py:70)", "dump (json/__init__.py:179)", "JSONEncoder.iterencode (json/encoder.py:432)"], IO),
    (["post (train.py:70)", "HTTPConnection.request (http/client.py:1303)",
      "socket.sendall (socket.py:1)"], IO),
    (ANOMALY_STACK, ANOMALY),
    (BACKWARD_STACK, BACKWARD),
    (OPTIMIZER_STACK, OPTIMIZER),
    (FORWARD_STACK, FORWARD),
    (PROFILER_STACK, PROFILER),
    (["main (train.py:80)", "sleep (time.py:1)"], OTHER),
    ([], OTHER),
])
def test_classify_main(stack, category):
    assert classify_main(frames([MODULE, *stack])) == category


def test_full_paths_classify_the_same():
    stack = [("<module>", "/home/u/train.py"),
             ("_BaseDataLoaderIter.__next__", "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"),
             ("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py")]
    assert classify_main(stack) == DATA_WAIT


def test_traceback_outside_the_model_is_not_anomaly_mode():
    # A user printing a traceback from the loop is not anomaly mode's per-op capture.
    stack = frames([MODULE, "report (train.py:90)", "format_stack (traceback.py:213)"])
    assert classify_main(stack) == OTHER


def test_data_loader_frames_win_over_io_below_them():
    # A dataset that reads files in the main process is producing a batch, not step-loop I/O.
    stack = frames([MODULE, *PRODUCE_IN_MAIN, "load (pickle.py:1)"])
    assert classify_main(stack) == PRODUCE


def test_io_inside_backward_is_io():
    stack = frames([MODULE, *BACKWARD_STACK, "hook (train.py:5)", "write (logging/__init__.py:1)"])
    assert classify_main(stack) == IO


def test_botorch_is_not_io():
    stack = frames([MODULE, "fit_gpytorch_mll (botorch/fit.py:100)", "ExactGP.__call__ (gpytorch/models/exact_gp.py:1)"])
    assert classify_main(stack) != IO


# --- classify_worker -------------------------------------------------------------------------------

@pytest.mark.parametrize(("below", "category"), [
    (WORKER_PRODUCE, PRODUCE),
    (["default_collate (torch/utils/data/_utils/collate.py:398)"], PRODUCE),
    (WORKER_IDLE_STACK, WORKER_IDLE),
    (["Queue.get (queue.py:171)"], WORKER_IDLE),
    (["Condition.wait (threading.py:320)"], WORKER_IDLE),
    ([], WORKER_IDLE),
    (WORKER_INIT, STARTUP),  # worker_init_fn: user code called straight from _worker_loop
    (["_try_get (torch/utils/data/_utils/foo.py:1)"], WORKER_IDLE),
    (["seed_all (torch/random.py:1)"], OTHER),
])
def test_classify_worker(below, category):
    assert classify_worker(frames([*FORK, *below])) == category


def test_worker_not_yet_in_its_loop_is_starting():
    bootstrap = frames([*FORK[:-1], "_wrap (torch/multiprocessing/spawn.py:1)"])
    assert classify_worker(bootstrap) == STARTUP


def test_parent_frames_above_the_fork_do_not_matter():
    # The parent was inside DataLoader.__iter__ at fork time; the worker is producing.
    assert classify_main(frames(FORK)) == STARTUP
    assert classify_worker(frames([*FORK, *WORKER_PRODUCE])) == PRODUCE


# --- parse_raw -------------------------------------------------------------------------------------

def test_parse_raw_main_line():
    [s] = parse_raw(main_line(WAIT_FOR_BATCH[:2], 37), MAIN_PID)
    assert s.pid == MAIN_PID and s.role == "main" and s.thread == "MainThread" and s.count == 37
    assert s.stack == [("<module>", "train.py"), ("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"),
                       ("_MultiProcessingDataLoaderIter._next_data", "torch/utils/data/dataloader.py")]


def test_parse_raw_leaves_out_the_agents_own_frames():
    """A launched job's backward runs through the agent's wrapper: the job's frames stay, the
    wrapper never shows (nor in the stack tables of a report)."""
    agent = "/venv/lib/python3.12/site-packages/fieldguide/agent/inside/capabilities/loop.py"
    line = (f"thread ({MAIN_PID}): MainThread;<module> (train.py:30);backward (torch/_tensor.py:625);"
            f"LoopTiming.wrap_backward.<locals>.backward ({agent}:250);"
            "backward (torch/autograd/__init__.py:354) 9")
    [s] = parse_raw(f'process {MAIN_PID}:"python train.py";{line}', MAIN_PID)
    assert s.stack == [("<module>", "train.py"), ("backward", "torch/_tensor.py"),
                       ("backward", "torch/autograd/__init__.py")]
    assert s.leaf_line == 354
    from fieldguide.probes.compile_records import is_user_file

    assert is_user_file("/job/train.py") and not is_user_file(agent)


def test_parse_raw_worker_line():
    [s] = parse_raw(worker_line(101, WORKER_IDLE_STACK, 12), MAIN_PID)
    assert s.pid == 101 and s.role == "worker" and s.thread == "MainThread" and s.count == 12
    assert s.stack[0] == ("<module>", "train.py")
    assert s.stack[-1] == ("Connection.poll", "multiprocessing/connection.py")
    assert ("_worker_loop", "torch/utils/data/_utils/worker.py") in s.stack


def test_parse_raw_of_a_launcher_keeps_one_rank_and_its_workers_only():
    launcher, sibling = 'process 90:"torchrun"', 'process 200:"python train.py"'
    text = "\n".join([
        f"{launcher};thread (90): MainThread;<module> (run.py:1);wait (subprocess.py:1) 50",
        f"{launcher};{main_line(FORWARD_STACK, 7)}",
        f"{launcher};{worker_line(101, WORKER_PRODUCE, 4)}",
        f"{launcher};{sibling};thread (200): MainThread;<module> (train.py:10) 30",
        f'{launcher};{sibling};process 201:"python train.py";thread (201): MainThread;<module> (train.py:10) 9',
    ])
    samples = parse_raw(text, MAIN_PID)
    assert [(s.pid, s.role, s.count) for s in samples] == [(MAIN_PID, "main", 7), (101, "worker", 4)]


def test_parse_raw_other_threads_blank_and_junk_lines():
    text = "\n".join([
        main_line(FORWARD_STACK, 5),
        main_line(["Thread.run (threading.py:1)", "_pin_memory_loop (torch/utils/data/_utils/pin_memory.py:1)"],
                  9, thread="Thread-1 (_pin_memory_loop)", tid=105),
        "",
        "py-spy> Sampling process 100 times a second",
        main_line(BACKWARD_STACK, 0),
    ])
    samples = parse_raw(text, MAIN_PID)
    assert [(s.thread, s.count) for s in samples] == [("MainThread", 5), ("Thread-1 (_pin_memory_loop)", 9),
                                                      ("MainThread", 0)]


def test_parse_raw_frame_without_a_file():
    [s] = parse_raw(f"{PROC};thread (100): MainThread;<module> (train.py:1);native_thing 3", MAIN_PID)
    assert s.stack == [("<module>", "train.py"), ("native_thing", "")]


def test_parse_raw_without_process_prefix_is_the_main_pid():
    [s] = parse_raw("thread (100): MainThread;<module> (train.py:1) 4", MAIN_PID)
    assert s.pid == MAIN_PID and s.role == "main" and s.thread == "MainThread"


@pytest.mark.parametrize("head", ["thread (0X7F3A2B1C0740): MainThread", f"thread ({MAIN_PID})"])
def test_parse_raw_thread_heads_py_spy_also_writes(head):
    text = f"{PROC};{head};" + ";".join([MODULE, *WAIT_FOR_BATCH]) + " 8"
    [s] = parse_raw(text, MAIN_PID)
    assert not s.stack[0][0].startswith("thread (")
    values, _ = stack_values([s], [])
    assert values["samples"] == 8


# --- stack_values end to end -------------------------------------------------------------------------

def starved_by_workers() -> tuple[str, str]:
    """Main waits 80/100 samples; 2 workers produce 60/80 samples, 54 of them on the CPU."""
    all_text = "\n".join([
        main_line(WAIT_FOR_BATCH, 80),
        main_line(FORWARD_STACK, 12),
        main_line(BACKWARD_STACK, 8),
        worker_line(101, WORKER_PRODUCE, 30),
        worker_line(102, WORKER_PRODUCE, 30),
        worker_line(101, WORKER_IDLE_STACK, 10),
        worker_line(102, WORKER_IDLE_STACK, 10),
        main_line(["Thread.run (threading.py:1)"], 50, thread="Thread-1 (_pin_memory_loop)", tid=105),
    ])
    active_text = "\n".join([
        main_line(WAIT_FOR_BATCH, 2),
        main_line(FORWARD_STACK, 12),
        main_line(BACKWARD_STACK, 8),
        worker_line(101, WORKER_PRODUCE, 27),
        worker_line(102, WORKER_PRODUCE, 27),
    ])
    return all_text, active_text


def values_of(all_text: str, active_text: str) -> dict:
    values, _ = stack_values(parse_raw(all_text, MAIN_PID), parse_raw(active_text, MAIN_PID))
    return values


def test_stack_values_data_wait_with_cpu_bound_workers():
    values = values_of(*starved_by_workers())
    assert values["samples"] == 100
    assert values["workers_sampled"] == 2
    assert values["data_wait_fraction"] == pytest.approx(0.8)
    assert values["producer"] == "workers"
    assert values["producer_cpu_fraction"] == pytest.approx(0.9)
    assert values["worker_producing_fraction"] == pytest.approx(0.75)
    assert values["forward_fraction"] == pytest.approx(0.12)
    assert values["backward_fraction"] == pytest.approx(0.08)
    assert values["io_fraction"] == 0.0
    assert values["blocked_other_fraction"] == 0.0
    assert values["startup_wait_fraction"] == pytest.approx(0.0)
    assert values["optimizer_fraction"] == 0.0


def test_stack_values_waiting_workers_from_active_samples():
    all_text, _ = starved_by_workers()
    active_text = "\n".join([main_line(FORWARD_STACK, 12), worker_line(101, WORKER_PRODUCE, 3),
                             worker_line(102, WORKER_PRODUCE, 3)])
    values = values_of(all_text, active_text)
    assert values["producer"] == "workers"
    assert values["producer_cpu_fraction"] == pytest.approx(0.1)


def test_stack_values_producing_in_the_main_process():
    all_text = "\n".join([main_line(PRODUCE_IN_MAIN, 50), main_line(FORWARD_STACK, 30),
                          main_line(OPTIMIZER_STACK, 20)])
    active_text = "\n".join([main_line(PRODUCE_IN_MAIN, 45), main_line(FORWARD_STACK, 30)])
    values = values_of(all_text, active_text)
    assert values["workers_sampled"] == 0
    assert values["producer"] == "main process"
    assert values["producer_cpu_fraction"] == pytest.approx(0.9)
    assert values["data_wait_fraction"] == pytest.approx(0.5)  # producing in main counts as waiting for data
    assert values["worker_producing_fraction"] is None
    assert values["optimizer_fraction"] == pytest.approx(0.2)


def test_stack_values_producer_none_when_too_few_produce_samples():
    all_text = "\n".join([main_line(PRODUCE_IN_MAIN, MIN_PRODUCE_SAMPLES - 1), main_line(FORWARD_STACK, 96)])
    values = values_of(all_text, all_text)
    assert values["producer"] is None
    assert values["producer_cpu_fraction"] is None
    assert values["data_wait_fraction"] == pytest.approx(0.04)


def test_stack_values_producer_cpu_fraction_is_capped_at_one():
    # The two samplers run independently: the on-CPU one can see a few more samples.
    all_text = main_line(PRODUCE_IN_MAIN, 20)
    active_text = main_line(PRODUCE_IN_MAIN, 23)
    assert values_of(all_text, active_text)["producer_cpu_fraction"] == 1.0


def test_stack_values_io_and_blocked_other():
    # The sleep is in the training loop itself (the frame that calls the model), not in a call
    # the loop makes for its next batch: it is no data wait.
    all_text = "\n".join([main_line(SAVE, 30), main_line(["sleep (time.py:1)"], 20),
                          main_line(FORWARD_STACK, 50)])
    active_text = "\n".join([main_line(SAVE, 10), main_line(["sleep (time.py:1)"], 5),
                             main_line(FORWARD_STACK, 50)])
    values = values_of(all_text, active_text)
    assert values["samples"] == 100
    assert values["io_fraction"] == pytest.approx(0.3)
    assert values["blocked_other_fraction"] == pytest.approx(0.15)
    assert values["data_wait_fraction"] == 0.0


def test_stack_values_anomaly_and_profiler_fractions():
    all_text = "\n".join([main_line(ANOMALY_STACK, 40), main_line(PROFILER_STACK, 10), main_line(FORWARD_STACK, 50)])
    values = values_of(all_text, all_text)
    assert values["anomaly_trace_fraction"] == pytest.approx(0.4)
    assert values["profiler_fraction"] == pytest.approx(0.1)


def test_stack_values_worker_startup():
    # Main: 20 samples creating the iterator, 40 waiting; workers: half of their samples in worker_init_fn.
    all_text = "\n".join([main_line(STARTUP_MAIN, 20), main_line(WAIT_FOR_BATCH, 40), main_line(FORWARD_STACK, 40),
                          worker_line(101, WORKER_INIT, 10), worker_line(101, WORKER_PRODUCE, 10)])
    values = values_of(all_text, "")
    # startup = main's own share + the data wait share times the workers' startup share
    assert values["startup_wait_fraction"] == pytest.approx(0.2 + 0.4 * 0.5)
    assert values["data_wait_fraction"] == pytest.approx(0.4)
    assert values["producer"] == "workers" and values["producer_cpu_fraction"] == 0.0


def test_stack_values_no_samples():
    values, evidence = stack_values([], [])
    assert values["samples"] == 0
    assert values["data_wait_fraction"] is None and values["io_fraction"] is None
    assert values["blocked_other_fraction"] is None and values["startup_wait_fraction"] is None
    assert evidence["top_stacks"] == []


def test_stack_values_evidence():
    values, evidence = stack_values(*[parse_raw(t, MAIN_PID) for t in starved_by_workers()])
    assert evidence["main_categories"][DATA_WAIT] == {"samples": 80, "on_cpu": 2}
    assert list(evidence["main_categories"]) == [DATA_WAIT, FORWARD, BACKWARD]
    assert evidence["worker_categories"][PRODUCE] == {"samples": 60, "on_cpu": 54}
    assert evidence["worker_categories"][WORKER_IDLE] == {"samples": 20, "on_cpu": 0}
    top = evidence["top_stacks"][0]
    assert top["share"] == 0.8 and top["category"] == DATA_WAIT
    assert top["stack"].startswith("BaseSelector.select (selectors.py) ← wait (connection.py)")
    assert len(evidence["top_worker_stacks"]) == 4


def test_summarize_counts_main_thread_only():
    samples = parse_raw(starved_by_workers()[0], MAIN_PID)
    summary = summarize(samples, [])
    assert summary.main_total == 100  # the pin-memory thread's 50 samples are not the main thread
    assert summary.worker_total == 80
    assert summary.worker_pids == {101, 102}
    assert summary.main_share(DATA_WAIT) == pytest.approx(0.8)
    assert summary.worker_share(PRODUCE) == pytest.approx(0.75)


def test_workers_replaced_mid_window_make_idle_waits_start_up_waits():
    """Workers re-spawned each epoch (4 pids seen, 2 alive at once): the main thread's waits while
    no worker produces count as start-up; with the same samples and no churn they do not."""
    from fieldguide.probes.stack_categories import ThreadSample
    from fieldguide.probes.stacks import stack_values

    main = [ThreadSample(1, "main", "MainThread", [("<module>", "t.py"),
                         ("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py")], 40),
            ThreadSample(1, "main", "MainThread", [("<module>", "t.py"),
                         ("Module._call_impl", "torch/nn/modules/module.py")], 60)]
    idle = [("_worker_loop", "torch/utils/data/_utils/worker.py"), ("Queue.get", "multiprocessing/queues.py")]
    workers = [ThreadSample(pid, "worker", "MainThread", idle, 50) for pid in (11, 12, 13, 14)]
    churned, _ = stack_values(main + workers, main, alive_at_end={13, 14})
    assert churned["workers_replaced"] is True
    assert churned["startup_wait_fraction"] == pytest.approx(0.4)
    steady, _ = stack_values(main + workers, main, alive_at_end={11, 12, 13, 14})
    assert steady["workers_replaced"] is False
    assert steady["startup_wait_fraction"] == pytest.approx(0.0)


def test_record_function_in_every_optimizer_step_is_not_the_profiler():
    from fieldguide.probes.stack_categories import OPTIMIZER, PROFILER, classify_main

    step = [("<module>", "train.py"), ("Optimizer.profile_hook_step.<locals>.wrapper", "torch/optim/optimizer.py"),
            ("record_function.__exit__", "torch/autograd/profiler.py")]
    assert classify_main(step) == OPTIMIZER
    leftover = [("<module>", "train.py"), ("profile.__exit__", "torch/autograd/profiler.py")]
    assert classify_main(leftover) == PROFILER


def test_children_that_are_not_dataloader_workers_are_not_counted_as_workers():
    from fieldguide.probes.stack_categories import ThreadSample
    from fieldguide.probes.stacks import stack_values

    main = [ThreadSample(1, "main", "MainThread", [("<module>", "t.py"),
                         ("Module._call_impl", "torch/nn/modules/module.py")], 50)]
    compile_worker = [ThreadSample(9, "worker", "MainThread", [("<module>", "torch/_inductor/compile_worker/__main__.py"),
                                   ("wait", "multiprocessing/connection.py")], 50)]
    values, _ = stack_values(main + compile_worker, main, alive_at_end=set())
    assert values["workers_sampled"] == 0
    assert values["startup_wait_fraction"] == 0.0
    assert values["workers_replaced"] is False


# --- blocked threads: sleeps, locks, collectives and device syncs are not I/O --------------------------

# What py-spy shows for a main thread blocked in a C call: the caller's own frame and line, nothing below.
USER_LEAF = ["main (/home/u/train.py:80)", "step (/home/u/train.py:42)"]


@pytest.mark.parametrize(("source", "category"), [
    ("time.sleep(0.01)", SLEEP),
    ("sleep(0.5)", SLEEP),
    ("lock.acquire()", LOCK_WAIT),
    ("self._done.wait(timeout=5)", LOCK_WAIT),
    ("worker.join()", LOCK_WAIT),
    ("with self._lock:", LOCK_WAIT),
    ("os.fsync(f.fileno())", IO),
    ("os.replace(tmp, path)", IO),
    ("with open(path, 'wb') as f:", IO),
    ("self.log.write(json.dumps(rec) + '\\n')", IO),
    ("pickle.dump({'step': step,\n             'weights': weights}, f,\n             protocol=5)", IO),
    ("conn.sendall(payload)", IO),
    ("loss_value = loss.item()", DEVICE_SYNC),
    ("preds = logits.argmax(1).cpu()", DEVICE_SYNC),
    ("torch.cuda.synchronize()", DEVICE_SYNC),
    ("y = x.to('cpu')", DEVICE_SYNC),
])
def test_classify_call(source, category):
    assert classify_call(source) == category


@pytest.mark.parametrize("source", ["x = model(batch)", "path = os.path.join(a, b)", "s = ', '.join(names)",
                                    "h = self.read_head(x)", "total += asyncio_sleep_count", ""])
def test_classify_call_says_nothing_without_a_known_call(source):
    assert classify_call(source) is None


def test_a_sleeping_main_thread_is_sleep_not_io():
    # time.sleep is C: py-spy's innermost frame is the caller's line, not a `sleep` frame.
    assert classify_main(frames(USER_LEAF), "time.sleep(0.01)") == SLEEP
    assert classify_main(frames(USER_LEAF)) == OTHER  # without the source, nothing is claimed


@pytest.mark.parametrize(("stack", "category"), [
    # threading.Event().wait / queue.Queue().get, as py-spy 0.4.3 shows them on Python 3.11
    (["step (train.py:10)", "Event.wait (threading.py:629)", "Condition.wait (threading.py:331)"], LOCK_WAIT),
    (["step (train.py:12)", "Queue.get (queue.py:180)", "Condition.wait (threading.py:331)"], LOCK_WAIT),
    (["train (train.py:60)", "Thread.join (threading.py:1112)"], LOCK_WAIT),
    (["train (train.py:60)", "wrapper (torch/distributed/c10d_logger.py:81)",
      "barrier (torch/distributed/distributed_c10d.py:4000)"], COLLECTIVE),
    (["train (train.py:60)", "wrapper (torch/distributed/c10d_logger.py:81)",
      "all_reduce (torch/distributed/distributed_c10d.py:2500)"], COLLECTIVE),
    (["train (train.py:60)", "synchronize (torch/cuda/__init__.py:985)"], DEVICE_SYNC),
    (["train (train.py:60)", "Event.synchronize (torch/cuda/streams.py:220)"], DEVICE_SYNC),
])
def test_blocked_frames_have_their_own_categories(stack, category):
    assert classify_main(frames([MODULE, *stack])) == category


def test_a_line_inside_torch_is_not_read_as_a_call():
    # An optimizer's `.item()` on its CPU step counter is optimizer work, not a device sync.
    stack = frames([MODULE, *OPTIMIZER_STACK[:3], "_get_value (torch/optim/optimizer.py:90)"])
    assert classify_main(stack, "return x.item()") == OPTIMIZER


def test_the_data_loader_still_wins_over_the_leaf_line():
    assert classify_main(frames([MODULE, *PRODUCE_IN_MAIN]), "time.sleep(0.003)") == PRODUCE


def test_stack_values_separate_sleep_lock_sync_and_io():
    def sample(stack: list[str], count: int, source: str = "") -> ThreadSample:
        s = ThreadSample(MAIN_PID, "main", "MainThread", frames([MODULE, *stack]), count)
        s.leaf_source = source
        return s

    all_samples = [sample(USER_LEAF, 20, "time.sleep(0.01)"), sample(USER_LEAF, 10, "lock.acquire()"),
                   sample(["sync (train.py:5)", "synchronize (torch/cuda/__init__.py:985)"], 10),
                   sample(["ar (train.py:5)", "barrier (torch/distributed/distributed_c10d.py:1)"], 10),
                   sample(USER_LEAF, 15, "os.fsync(f.fileno())"), sample(USER_LEAF, 5),
                   sample(FORWARD_STACK, 30)]
    values, evidence = stack_values(all_samples, [sample(FORWARD_STACK, 30)])
    assert values["samples"] == 100
    assert values["sleep_fraction"] == pytest.approx(0.2)
    assert values["lock_wait_fraction"] == pytest.approx(0.1)
    assert values["device_sync_fraction"] == pytest.approx(0.1)
    assert values["collective_fraction"] == pytest.approx(0.1)
    assert values["io_fraction"] == pytest.approx(0.15)  # only the fsync line
    assert values["blocked_other_fraction"] == pytest.approx(0.05)  # blocked, on what no one can say
    assert evidence["main_categories"][SLEEP] == {"samples": 20, "on_cpu": 0}


def test_every_fraction_stack_sample_returns_is_between_0_and_1():
    from fieldguide.probes.stacks import StackSample

    # The two samplers disagree (the on-CPU one saw more); workers churn.
    all_text, _ = starved_by_workers()
    active_text = "\n".join([main_line(WAIT_FOR_BATCH, 200), main_line(["main (train.py:80)"], 300),
                             worker_line(101, WORKER_PRODUCE, 500)])
    values, _ = stack_values(parse_raw(all_text, MAIN_PID), parse_raw(active_text, MAIN_PID), alive_at_end={101})
    for name, unit in StackSample.values.items():
        if unit == "fraction" and values[name] is not None:
            assert 0.0 <= values[name] <= 1.0, (name, values[name])


# --- reading the source of a blocked line -------------------------------------------------------------

SOURCE = '''import os, pickle


def save(state, path):
    with open(path, "wb") as f:
        pickle.dump(state, f,
                    protocol=pickle.HIGHEST_PROTOCOL)
        os.fsync(f.fileno())
'''


def test_statement_spans_cover_multi_line_calls_and_compound_headers():
    spans = statement_spans(SOURCE)
    assert (6, 7) in spans  # the two-line pickle.dump call
    assert (5, 5) in spans  # the `with` header only, not its body
    assert (8, 8) in spans
    assert statement_spans("def broken(:\n") == []


def test_source_reader_reads_the_statement_at_a_line(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    reader = SourceReader(pid=os.getpid())
    assert reader.statement(str(path), 7).strip().startswith("pickle.dump(state, f,")  # the line py-spy may report
    assert classify_call(reader.statement(str(path), 7)) == IO
    assert reader.statement(str(path), 5) == '    with open(path, "wb") as f:'
    assert reader.statement(str(path), 8).strip() == "os.fsync(f.fileno())"
    assert reader.statement(str(tmp_path / "gone.py"), 3) == ""


def test_source_reader_fills_main_thread_samples_from_parse_raw(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    line = f'{PROC};thread ({MAIN_PID}): MainThread;<module> ({path}:10);save ({path}:8) 12'
    [s] = parse_raw(line, MAIN_PID)
    assert s.leaf_line == 8 and s.stack[-1] == ("save", str(path))
    SourceReader(pid=os.getpid()).fill([s])
    assert s.leaf_source.strip() == "os.fsync(f.fileno())"
    values, _ = stack_values([s], [])
    assert values["io_fraction"] == 1.0


def test_source_reader_leaves_torch_lines_unread(tmp_path):
    # Their source never decides a category, and torch's files are large: not parsed at all.
    torch_file = tmp_path / "site-packages" / "torch" / "nn" / "modules" / "module.py"
    torch_file.parent.mkdir(parents=True)
    torch_file.write_text(SOURCE)
    line = f'{PROC};thread ({MAIN_PID}): MainThread;<module> (train.py:10);save ({torch_file}:8) 12'
    [s] = parse_raw(line, MAIN_PID)
    SourceReader(pid=os.getpid()).fill([s])
    assert s.leaf_source == ""


GET_BATCH_SLEEPING = ["get_batch (train.py:20)"]  # py-spy shows the line; the sleep is a C call
GET_BATCH_WORKING = ["get_batch (train.py:22)", "<listcomp> (train.py:22)"]
BACKWARD_FROM_MODULE = ["Tensor.backward (torch/_tensor.py:581)", "backward (torch/autograd/__init__.py:347)"]


def test_without_a_dataloader_the_loops_own_calls_for_a_batch_are_its_input():
    # <module> is the loop: it calls the model and backward; get_batch is what it calls for data.
    all_text = "\n".join([main_line(GET_BATCH_SLEEPING, 60), main_line(GET_BATCH_WORKING, 10),
                          main_line(FORWARD_STACK, 20), main_line(BACKWARD_FROM_MODULE, 10)])
    active_text = "\n".join([main_line(GET_BATCH_WORKING, 10), main_line(FORWARD_STACK, 20),
                             main_line(BACKWARD_FROM_MODULE, 10)])
    values = values_of(all_text, active_text)
    assert values["data_wait_fraction"] == pytest.approx(0.7)
    assert values["producer"] == "the training thread"
    assert values["producer_cpu_fraction"] == pytest.approx(10 / 70)
    assert values["input_from"] == "get_batch (train.py), in the loop"


def test_without_a_model_call_nothing_is_input():
    values = values_of(main_line(GET_BATCH_SLEEPING, 50), "")
    assert values["data_wait_fraction"] == 0.0 and values["producer"] is None


RECORDS_DECODING = ["records (train.py:12)", "<listcomp> (train.py:12)", "loads (/usr/lib/python3.12/json/__init__.py:346)",
                    "JSONDecoder.decode (/usr/lib/python3.12/json/decoder.py:338)",
                    "JSONDecoder.raw_decode (/usr/lib/python3.12/json/decoder.py:354)"]
CHECKPOINT_SAVING = ["save_checkpoint (train.py:30)", "save (torch/serialization.py:965)",
                     "_save (torch/serialization.py:1200)"]


def test_decoding_in_the_loops_call_for_a_batch_is_input_and_a_checkpoint_helper_is_io():
    # The same classifier in both modes: json.loads inside the batch generator produces the
    # batch (it was once read as the loop's blocking I/O from outside, as input from inside);
    # torch.save inside the job's own save_checkpoint() stays the loop's I/O.
    all_text = "\n".join([main_line(RECORDS_DECODING, 50), main_line(CHECKPOINT_SAVING, 20),
                          main_line(FORWARD_STACK, 20), main_line(BACKWARD_FROM_MODULE, 10)])
    active_text = "\n".join([main_line(RECORDS_DECODING, 50), main_line(CHECKPOINT_SAVING, 5),
                             main_line(FORWARD_STACK, 20), main_line(BACKWARD_FROM_MODULE, 10)])
    values = values_of(all_text, active_text)
    assert values["data_wait_fraction"] == pytest.approx(0.5)
    assert values["producer"] == "the training thread" and values["producer_cpu_fraction"] == pytest.approx(1.0)
    assert values["input_from"] == "records (train.py), in the loop"
    assert values["io_fraction"] == pytest.approx(0.2)
    assert values["io_at"] == "save_checkpoint (train.py)"


def test_a_blocked_read_in_the_batch_call_is_input_a_blocked_write_is_not(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("\n" * 49 + "    data = f.read()\n" + "\n" * 9 + "    f.write(blob)\n")
    reading = [f"next_shard ({path}:50)"]
    writing = [f"log_step ({path}:60)"]
    all_text = "\n".join([main_line(reading, 30), main_line(writing, 30), main_line(FORWARD_STACK, 30),
                          main_line(BACKWARD_FROM_MODULE, 10)])
    samples = parse_raw(all_text, MAIN_PID)
    SourceReader(pid=os.getpid()).fill(samples)
    values, _ = stack_values(samples, [])
    assert values["data_wait_fraction"] == pytest.approx(0.3)
    assert values["input_from"] == "next_shard (train.py), in the loop"
    assert values["io_fraction"] == pytest.approx(0.3) and values["io_at"] == "log_step (train.py:60)"


SITE = "/venv/lib/python3.12/site-packages"
CLOSURE = [f"Trainer.fit ({SITE}/lightning/pytorch/trainer/trainer.py:560)",
           f"LightningOptimizer.step ({SITE}/lightning/pytorch/core/optimizer.py:154)",
           "SGD.step (torch/optim/sgd.py:80)",
           f"_AutomaticOptimization._training_step ({SITE}/lightning/pytorch/loops/optimization/automatic.py:319)",
           "LogisticRegression.training_step (train.py:30)"]
LOGGING = CLOSURE + [f"LightningModule.log ({SITE}/lightning/pytorch/core/module.py:510)",
                     "Tensor.mean (torch/_tensor.py:40)"]
UPDATE = CLOSURE[:3] + ["_single_tensor_sgd (torch/optim/sgd.py:300)"]
PROGRESS = CLOSURE[:1] + [f"TQDMProgressBar.on_train_batch_end ({SITE}/lightning/pytorch/callbacks/progress/tqdm_progress.py:280)",
                          f"tqdm.format_meter ({SITE}/tqdm/std.py:600)", "Formatter.format (/usr/lib/python3.12/string.py:190)"]
LOSS_IN_USER_CODE = CLOSURE + ["binary_cross_entropy_with_logits (torch/nn/functional.py:3600)"]


def test_a_trainers_logging_inside_the_optimizer_closure_is_its_bookkeeping_not_the_update():
    assert classify_main(frames([MODULE, *LOGGING])) == OTHER
    assert classify_main(frames([MODULE, *UPDATE])) == OPTIMIZER
    assert classify_main(frames([MODULE, *CLOSURE, *FORWARD_STACK[:2]])) == FORWARD
    all_text = "\n".join([main_line(LOGGING, 40), main_line(PROGRESS, 20), main_line(UPDATE, 10),
                          main_line(LOSS_IN_USER_CODE, 10), main_line(CLOSURE + FORWARD_STACK, 20)])
    values = values_of(all_text, "")
    assert values["bookkeeping_fraction"] == pytest.approx(0.6)  # the job's own loss is not bookkeeping
    assert values["bookkeeping_at"] == "LightningModule.log (lightning) 67%, tqdm.format_meter (tqdm) 33%"
    assert values["overhead_fraction"] == values["bookkeeping_fraction"]
    assert values["optimizer_fraction"] == pytest.approx(0.1)


HF_SAVE = [f"Trainer.train ({SITE}/transformers/trainer.py:2200)",
           f"Trainer._maybe_log_save_evaluate ({SITE}/transformers/trainer.py:3100)",
           f"Trainer._save_checkpoint ({SITE}/transformers/trainer.py:3200)"]
HF_RNG_STATE = HF_SAVE + ["get_rng_state (torch/random.py:40)"]  # gathering state: no I/O frame
HF_OPTIMIZER_WRITE = HF_SAVE + [f"Trainer._save_optimizer_and_scheduler ({SITE}/transformers/trainer.py:3300)",
                                "save (torch/serialization.py:965)", "_save (torch/serialization.py:1200)"]
HF_EVERY_STEP = [f"Trainer.train ({SITE}/transformers/trainer.py:2200)",
                 f"Trainer._maybe_log_save_evaluate ({SITE}/transformers/trainer.py:3100)",
                 "Tensor.item (torch/_tensor.py:40)"]


def test_a_trainers_checkpoint_save_is_io_and_is_named_where_it_is_called():
    # The whole save is the write's cost (state dicts, RNG states, the trainer's JSON), not only
    # its file writes; the call site is the framework's function, not the job's `main`.
    assert classify_main(frames([MODULE, *HF_RNG_STATE])) == IO
    assert classify_main(frames([MODULE, *HF_EVERY_STEP])) == OTHER  # called every step, saves nothing
    values = values_of("\n".join([main_line(HF_RNG_STATE, 10), main_line(HF_OPTIMIZER_WRITE, 20),
                                  main_line(HF_EVERY_STEP, 10), main_line(FORWARD_STACK, 60)]), "")
    assert values["io_fraction"] == pytest.approx(0.3)
    assert values["io_at"] == "Trainer._save_optimizer_and_scheduler (transformers)"
    assert classify_main(frames([MODULE, "checkpoint (torch/utils/checkpoint.py:480)"])) == OTHER
