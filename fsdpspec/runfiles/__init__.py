"""The files and line protocols `fsdpspec run` and the engine share, one home each: the
resolved spec (`resolved`), the run's event history (`events`), the progress lines
(`progress`), the stop file (`outcome`) and the data files a data path holds
(`datafiles`). Torch-free: the launcher reads and writes them without the engine."""
