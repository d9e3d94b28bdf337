"""Optional TensorBoard scalars for training records (needs the `tensorboard` package)."""
from __future__ import annotations

from partition.errors import MissingExtraError


class TensorBoardLog:
    def __init__(self, folder: str):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise MissingExtraError("--tensorboard", "tensorboard", "tensorboard") from None
        self.writer = SummaryWriter(folder)

    def write(self, record: dict) -> None:
        step = int(record.get("epoch", 0))
        for key, value in record.items():
            if key != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def for_rank(folder: str | None, is_main: bool) -> TensorBoardLog | None:
    """Rank 0's TensorBoard log where one is asked for (`--tensorboard DIR`); None on every other rank."""
    return TensorBoardLog(folder) if folder and is_main else None
