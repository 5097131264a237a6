"""The Lightning logger and the Hugging Face callback, with small stand-ins
for lightning and transformers injected through sys.modules (neither is
installed here); they report through trainctl.report, replaced by a
recorder."""

import abc
import importlib
import sys
import types
import unittest
from argparse import Namespace
from unittest import mock

import trainctl


def lightning_stand_in():
    """Modules shaped like lightning.pytorch's: an abstract Logger with the
    abstract members of the real one, rank_zero_experiment and
    rank_zero_only (whose rank the test sets)."""
    rank = {"value": 0}

    class Logger(abc.ABC):
        @property
        @abc.abstractmethod
        def name(self): ...

        @property
        @abc.abstractmethod
        def version(self): ...

        @abc.abstractmethod
        def log_metrics(self, metrics, step=None): ...

        @abc.abstractmethod
        def log_hyperparams(self, params, *args, **kwargs): ...

        def finalize(self, status):
            pass

    def rank_zero_experiment(fn):
        return fn

    def rank_zero_only(fn):
        def wrapped(*args, **kwargs):
            if rank["value"] == 0:
                return fn(*args, **kwargs)
        return wrapped

    logger_mod = types.ModuleType("lightning.pytorch.loggers.logger")
    logger_mod.Logger = Logger
    logger_mod.rank_zero_experiment = rank_zero_experiment
    utilities = types.ModuleType("lightning.pytorch.utilities")
    utilities.rank_zero_only = rank_zero_only
    mods = {"lightning": types.ModuleType("lightning"),
            "lightning.pytorch": types.ModuleType("lightning.pytorch"),
            "lightning.pytorch.loggers": types.ModuleType("lightning.pytorch.loggers"),
            "lightning.pytorch.loggers.logger": logger_mod,
            "lightning.pytorch.utilities": utilities}
    return mods, rank


def transformers_stand_in():
    class TrainerCallback:
        def on_log(self, args, state, control, **kwargs):
            pass

        def on_train_end(self, args, state, control, **kwargs):
            pass
    mod = types.ModuleType("transformers")
    mod.TrainerCallback = TrainerCallback
    return {"transformers": mod}


class Recorder:
    def __init__(self):
        self.reports = []
        self.flushes = 0

    def report(self, step=None, **metrics):
        self.reports.append((step, metrics))

    def flush(self):
        self.flushes += 1


class Tensor:
    """A one-element tensor (or numpy scalar)."""

    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


def fresh_import(name, modules):
    """Imports ``name`` afresh with ``modules`` in sys.modules."""
    patch = mock.patch.dict(sys.modules, modules)
    patch.start()
    sys.modules.pop(name, None)
    return patch, importlib.import_module(name)


class LightningTest(unittest.TestCase):
    def setUp(self):
        mods, self.rank = lightning_stand_in()
        patch, self.mod = fresh_import("trainctl.integrations.lightning", mods)
        self.addCleanup(patch.stop)
        self.addCleanup(sys.modules.pop, "trainctl.integrations.lightning", None)
        self.rec = Recorder()
        for fn in ("report", "flush"):
            p = mock.patch.object(trainctl, fn, getattr(self.rec, fn))
            p.start()
            self.addCleanup(p.stop)

    def test_logger_is_a_complete_lightning_logger(self):
        logger = self.mod.TrainctlLogger(name="run")  # abstract members all defined
        self.assertEqual(logger.name, "run")
        self.assertIs(logger.experiment, trainctl)

    def test_log_metrics_reports_scalars_at_step(self):
        logger = self.mod.TrainctlLogger(prefix="lit/")
        logger.log_metrics({"train/loss": Tensor(0.5), "val acc": 0.9, "epoch": 1,
                            "note": "text", "nan": float("nan")}, step=12)
        self.assertEqual(self.rec.reports, [(12, {"lit/train/loss": 0.5, "lit/val_acc": 0.9,
                                                  "lit/epoch": 1.0})])

    def test_log_metrics_other_ranks_do_not_report(self):
        self.rank["value"] = 1
        self.mod.TrainctlLogger().log_metrics({"loss": 1.0}, step=0)
        self.assertEqual(self.rec.reports, [])

    def test_log_hyperparams_kept_not_reported_and_finalize_flushes(self):
        logger = self.mod.TrainctlLogger()
        logger.log_hyperparams(Namespace(lr=0.1, layers=4))
        self.assertEqual(logger.hyperparams, {"lr": 0.1, "layers": 4})
        logger.finalize("success")
        self.assertEqual((self.rec.reports, self.rec.flushes), ([], 1))

    def test_version_is_job_id_in_task(self):
        with mock.patch.dict("os.environ", {"TRAINCTL_JOB_ID": "17"}):
            self.assertEqual(self.mod.TrainctlLogger().version, 17)
        with mock.patch.dict("os.environ", {"TRAINCTL_JOB_ID": ""}):
            self.assertEqual(self.mod.TrainctlLogger().version, "local")


class HuggingFaceTest(unittest.TestCase):
    def setUp(self):
        patch, self.mod = fresh_import("trainctl.integrations.hf", transformers_stand_in())
        self.addCleanup(patch.stop)
        self.addCleanup(sys.modules.pop, "trainctl.integrations.hf", None)
        self.rec = Recorder()
        for fn in ("report", "flush"):
            p = mock.patch.object(trainctl, fn, getattr(self.rec, fn))
            p.start()
            self.addCleanup(p.stop)

    def state(self, step, zero=True):
        return types.SimpleNamespace(global_step=step, is_world_process_zero=zero)

    def test_on_log_reports_numbers_at_global_step(self):
        cb = self.mod.TrainctlCallback()
        self.assertIsInstance(cb, sys.modules["transformers"].TrainerCallback)
        cb.on_log(None, self.state(50), None, logs={"loss": 0.7, "learning_rate": 5e-5,
                                                    "epoch": 0.5, "status": "ok"})
        self.assertEqual(self.rec.reports, [(50, {"loss": 0.7, "learning_rate": 5e-5,
                                                  "epoch": 0.5})])

    def test_on_log_not_main_process_or_no_logs_reports_nothing(self):
        cb = self.mod.TrainctlCallback()
        cb.on_log(None, self.state(1, zero=False), None, logs={"loss": 1.0})
        cb.on_log(None, self.state(1), None)
        self.assertEqual(self.rec.reports, [])

    def test_on_train_end_flushes(self):
        self.mod.TrainctlCallback().on_train_end(None, self.state(9), None)
        self.assertEqual(self.rec.flushes, 1)


class ImportTest(unittest.TestCase):
    def test_importing_trainctl_imports_no_framework(self):
        for name in ("lightning", "pytorch_lightning", "transformers"):
            self.assertNotIn(name, sys.modules)
        import trainctl.integrations  # noqa: F401  (imports no framework)
        for name in ("lightning", "pytorch_lightning", "transformers"):
            self.assertNotIn(name, sys.modules)


if __name__ == "__main__":
    unittest.main()
