"""fsdpspec: declarative PyTorch FSDP training jobs."""

__version__ = "0.1.0"
