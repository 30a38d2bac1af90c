"""Per-step TensorBoard scalars through torch.utils.tensorboard.SummaryWriter (needs `tensorboard`)."""

from __future__ import annotations

from torch.utils.tensorboard import SummaryWriter


class ScalarLog:
    """One event file per pipeline, in the same folder as its traces: one TensorBoard run each."""

    def __init__(self, log_dir: str, config: dict):
        self.writer = SummaryWriter(log_dir=log_dir)
        lines = "\n".join(f"    {k}: {v}" for k, v in config.items())
        self.writer.add_text("config", lines)

    def step(
        self, step: int, times: dict[str, float], worker_ms: dict[str, float], loss: float, measured: bool
    ) -> None:
        w = self.writer
        for name, seconds in times.items():
            w.add_scalar(f"step_s/{name}", seconds, step)
        for name, ms in worker_ms.items():
            w.add_scalar(f"worker_ms_per_sample/{name}", ms, step)
        w.add_scalar("train/loss", loss, step)
        # 1 for the steps in the statistics, 0 for warm-up and profiled steps.
        w.add_scalar("train/measured", float(measured), step)

    def close(self) -> None:
        self.writer.close()
