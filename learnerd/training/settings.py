"""``[training]``: the daemon-wide settings of training cycles (:mod:`learnerd.training.cycle`); a document's
hyperparameters are its own ``training`` block (:mod:`learnerd.training.config`)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from learnerd.ml.settings import device_spec
from learnerd.sections import Section
from learnerd.training.checkpoint import DEFAULT_EVERY_S


class TrainingSettings(Section):
    """LoRA training cycles (hyperparameters come from each document).

    Daemon-wide settings of training cycles; per-document hyperparameters live in the ``.dlm`` file.
    Times in seconds.
    """

    enabled: bool = True
    """false: the daemon never trains (run and run --once: the pipeline only)"""
    replay_ratio: float = Field(2.0, ge=0, le=100)
    """an incremental cycle rehearses ceil(ratio × new rows) unchanged rows an epoch, every one in turn ..."""
    replay_min_rows: int = Field(32, ge=0)
    """... but at least this many (when the document has them); dlm's budget"""
    num_threads: int = Field(0, ge=0)
    """torch threads in the training process; 0 = the cores other processes leave free, measured again every 30 s"""
    niceness: int = Field(10, ge=0, le=19)
    """added to the training process's nice value: the event loop and other programs get the CPU first"""
    checkpoint_every_s: float = Field(DEFAULT_EVERY_S, ge=0)
    """seconds of training between two checkpoints: a cycle stopped part-way goes on from its last (0: every step)"""
    warm_spare: bool = True
    """keep one training process started ahead of need (learnerd run)"""
    debounce_s: float = Field(2.0, gt=0)
    """a changed .dlm document is trained after this long without a change ..."""
    debounce_max_s: float = Field(60.0, gt=0)
    """... or at the latest this long after its first unanswered change"""
    rescan_interval_s: float = Field(10.0, gt=0)
    """full rescan of the documents: the safety net beside file-system events"""
    broken_document_retry_s: float = Field(30.0, gt=0)
    """a document that does not parse (mid-edit) is checked again this often"""
    device: str = "auto"
    """auto (CUDA in bf16 when torch sees a GPU, else CPU float32), cpu, cuda, cuda:N"""

    _device = field_validator("device")(device_spec("training"))

    @model_validator(mode="after")
    def _debounce_ordered(self) -> TrainingSettings:
        if self.debounce_s > self.debounce_max_s:
            raise ValueError(
                f"training: need debounce_s <= debounce_max_s, not {self.debounce_s} > {self.debounce_max_s}"
            )
        return self
