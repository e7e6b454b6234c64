"""Stands in for Triton's `triton_shm_monitor` C extension (qa/common/shm_util.py's leak
probe) in cases_gpu's clients. The probe makes one monitor per /dev/shm region named
triton_python_backend_shm_region*; pbserve makes none, so none is ever made here."""


class SharedMemoryManager:
    def __init__(self, name: str) -> None:
        raise NotImplementedError(f"{name}: not a pbserve region; nothing here reads it")
