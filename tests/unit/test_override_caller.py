"""Where a try-fix arm's change was made, said as the user would change it."""

from __future__ import annotations

import importlib.util
import textwrap
from functools import partial
from pathlib import Path

from fieldguide.agent.inside.capabilities.overrides import caller

FRAMEWORK = textwrap.dedent("""
    class TrainingArguments:
        def __init__(self):
            self.dataloader_num_workers = 0
            self.logging_steps = 50

    class Trainer:
        def __init__(self, args, make_loader):
            self.args, self.make_loader = args, make_loader

        def get_train_dataloader(self):
            return self.make_loader()
""")


def load_framework(tmp_path: Path):
    path = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "trainkit" / "trainer.py"
    path.parent.mkdir(parents=True)
    path.write_text(FRAMEWORK)
    spec = importlib.util.spec_from_file_location("trainkit_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_call_the_job_makes_itself_is_its_own_line():
    where = caller("num_workers")
    assert where.startswith("test_override_caller.py:") and "via" not in where


def test_a_call_a_framework_makes_names_the_framework_and_its_setting(tmp_path):
    framework = load_framework(tmp_path)
    # The trainer builds the loader (here: calls `caller` as the patched DataLoader would).
    trainer = framework.Trainer(framework.TrainingArguments(), partial(caller, "num_workers"))
    where = trainer.get_train_dataloader()
    assert where.startswith("test_override_caller.py:")
    assert where.endswith(" via trainkit (its setting TrainingArguments.dataloader_num_workers)")
    trainer = framework.Trainer(framework.TrainingArguments(), partial(caller, "pin_memory"))
    assert trainer.get_train_dataloader().endswith(" via trainkit")  # no field named for it
