"""TensorFlow, imported the one way every process of the package imports it.

With tf-keras (`TF_USE_LEGACY_KERAS`, which must be set before the first import), and without the lines TensorFlow
prints while it starts on a machine without a GPU: that oneDNN is on, that no CUDA driver was found and, at the first
look for devices, an E-level "failed call to cuInit". None of them is an error there, and users read them as one.
TF_CPP_MIN_LOG_LEVEL does not govern them all (lines logged before absl's InitializeLog reach stderr at any level), so
the import and the device probe run with the process's stderr captured, and every other line is written back.
TF_CPP_MIN_LOG_LEVEL=0, TensorFlow's own switch for all its logs, shows them too.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from types import ModuleType
from typing import Iterator

LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}  # TFoS's strategies need tf-keras (Keras 3 fails them)

# What TensorFlow prints at start-up on a CPU-only machine.
START_UP_NOISE = re.compile(
    r"cuInit|cudart_stub\.cc|cuda_platform\.cc|cuda_executor\.cc|oneDNN custom operations are on"
    r"|absl::InitializeLog\(\)|cpu_feature_guard\.cc|rebuild TensorFlow with the appropriate compiler flags"
    r"|Unable to register cu(?:DNN|FFT|BLAS) factory|computation placer already registered")


def tensorflow(devices: bool = True) -> ModuleType:
    """The `tensorflow` module; with `devices`, its devices probed (which fixes the GPUs a process
    sees: set CUDA_VISIBLE_DEVICES before). Quiet unless TF_CPP_MIN_LOG_LEVEL is 0."""
    os.environ.update(LEGACY_KERAS)
    with _without_start_up_noise():
        import tensorflow as tf

        if devices:
            tf.config.list_physical_devices()
    return tf


@contextlib.contextmanager
def _without_start_up_noise() -> Iterator[None]:
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0":
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not START_UP_NOISE.search(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
