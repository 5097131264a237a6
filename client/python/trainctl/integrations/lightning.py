"""PyTorch Lightning: a Logger that sends logged metrics to trainctl.

    from trainctl.integrations.lightning import TrainctlLogger
    trainer = lightning.Trainer(logger=TrainctlLogger())

``self.log("val_loss", ...)`` in a LightningModule then reaches
``trainctl.report(val_loss=..., step=trainer.global_step)``: see it with
``job.metrics()`` or ``trainctl metrics JOB``. As every Lightning logger, it
logs from global rank 0 only. Works with ``lightning`` (2.x) and the older
``pytorch_lightning`` package, whichever is installed (imported here only).
"""

import os
from argparse import Namespace
from typing import Any, Dict, Mapping, Optional, Union

import trainctl
from trainctl.integrations import scalars, to_step

try:
    from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the standalone package of Lightning 1.x
    from pytorch_lightning.loggers.logger import Logger, rank_zero_experiment
    from pytorch_lightning.utilities import rank_zero_only


class TrainctlLogger(Logger):
    """Lightning Logger reporting through trainctl.report (batched; flushed
    at finalize() and at exit).

    Args:
      name (str): the logger's name (Lightning's ``name``); default "trainctl".
      prefix (str): prepended to every metric key (e.g. "lit/").
      flush_on_finalize (bool): flush when training ends, so the last points
        are durable before the process goes on (default True).
    """

    def __init__(self, name: str = "trainctl", prefix: str = "",
                 flush_on_finalize: bool = True):
        super().__init__()
        self._name = name
        self._prefix = prefix
        self._flush_on_finalize = flush_on_finalize
        self.hyperparams: Dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> Union[int, str]:
        """The trainctl job id (TRAINCTL_JOB_ID), or "local" outside a task."""
        job = os.environ.get("TRAINCTL_JOB_ID", "")
        return int(job) if job.isdigit() else "local"

    @property
    @rank_zero_experiment
    def experiment(self):
        """The ``trainctl`` module: ``logger.experiment.report(...)``."""
        return trainctl

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: Optional[int] = None) -> None:
        values = scalars(metrics, self._prefix)
        if values:
            trainctl.report(step=to_step(step), **values)

    @rank_zero_only
    def log_hyperparams(self, params: Union[Dict[str, Any], Namespace], *args: Any,
                        **kwargs: Any) -> None:
        # The coordinator keeps scalars over steps, not a config: the
        # hyper-parameters are kept here (a sweep's are in the job's params).
        if isinstance(params, Namespace):
            params = vars(params)
        self.hyperparams.update(dict(params or {}))

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._flush_on_finalize:
            trainctl.flush()
