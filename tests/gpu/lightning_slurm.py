#!/usr/bin/env python3
"""A Lightning program as written for a Slurm cluster (Trainer(devices=2,
strategy="ddp"), no launcher code): fits a tiny model for a few steps.
Rank 0 prints one JSON line: the cluster environment Lightning chose
(SLURMEnvironment under `trainctl submit --slurm-env`,
TorchElasticEnvironment without it), global rank, world size, and the
steps each rank ran."""

import json
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class Tiny(pl.LightningModule):
    """A linear model on random data."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
trainer = pl.Trainer(accelerator="gpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                     num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")), strategy="ddp",
                     max_steps=5, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(), DataLoader(data, batch_size=32))
env = trainer.strategy.cluster_environment
if trainer.global_rank == 0:
    print(json.dumps({"cluster_environment": type(env).__name__,
                      "global_rank": trainer.global_rank, "world_size": trainer.world_size,
                      "steps": trainer.global_step, "lightning_version": pl.__version__,
                      "slurm_vars": sorted(k for k in os.environ if k.startswith("SLURM"))}),
          flush=True)
