"""Hugging Face Transformers: a TrainerCallback that sends the Trainer's logs
to trainctl.

    from trainctl.integrations.hf import TrainctlCallback
    trainer = Trainer(..., callbacks=[TrainctlCallback()])

Each ``on_log`` (every ``logging_steps``, and at evaluation) reports the
numeric entries (loss, learning_rate, eval_loss, epoch...) at
``state.global_step`` from the main process only. ``transformers`` is
imported here only.
"""

from typing import Any, Dict, Optional

import trainctl
from trainctl.integrations import scalars
from transformers import TrainerCallback


class TrainctlCallback(TrainerCallback):
    """Reports the Trainer's logs through trainctl.report (batched); flushes
    at the end of training so the last points are durable.

    Args:
      prefix (str): prepended to every metric key (e.g. "hf/").
    """

    def __init__(self, prefix: str = ""):
        super().__init__()
        self._prefix = prefix

    def on_log(self, args, state, control, logs: Optional[Dict[str, Any]] = None, **kwargs):
        if logs is None or not getattr(state, "is_world_process_zero", True):
            return
        values = scalars(logs, self._prefix)
        if values:
            trainctl.report(step=max(0, int(getattr(state, "global_step", 0) or 0)), **values)

    def on_train_end(self, args, state, control, **kwargs):
        if getattr(state, "is_world_process_zero", True):
            trainctl.flush()
