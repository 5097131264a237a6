"""Report training metrics to trainctl from Python: ctypes over the C ABI of
libtrainctl_nccl.so (worker/nccl/trainctl_nccl.h); no other dependency.

    from trainctl_metrics import report, flush
    report(loss=0.25, samples_per_s=1.2e4, step=1200)

Runs inside a trainctl task (its launch environment names the job, attempt,
token and coordinator). Points are batched by the library (64 points or 1 s)
and flushed at interpreter exit; flush() makes them durable now. Errors raise
RuntimeError with the coordinator's message. The library is looked up in
$TRAINCTL_NCCL_LIB, then by name through the dynamic loader.
"""

import atexit
import ctypes
import os

_lib = None


def _load():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(os.environ.get("TRAINCTL_NCCL_LIB", "libtrainctl_nccl.so"))
        lib.trainctl_report_metrics.argtypes = [
            ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_double),
            ctypes.c_size_t, ctypes.c_int64]
        lib.trainctl_flush_metrics.argtypes = []
        lib.trainctl_metrics_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.trainctl_metrics_last_error.restype = ctypes.c_size_t
        atexit.register(lib.trainctl_flush_metrics)
        _lib = lib
    return _lib


def _check(code):
    if code != 0:
        buf = ctypes.create_string_buffer(1024)
        _lib.trainctl_metrics_last_error(buf, len(buf))
        raise RuntimeError("trainctl metrics (code %d): %s" % (code, buf.value.decode()))


def report(step=0, **metrics):
    """Reports scalars of one training step, e.g. report(loss=0.25, step=10)."""
    lib = _load()
    n = len(metrics)
    keys = (ctypes.c_char_p * n)(*[k.encode() for k in metrics])
    values = (ctypes.c_double * n)(*[float(v) for v in metrics.values()])
    _check(lib.trainctl_report_metrics(keys, values, n, int(step)))


def flush():
    """Sends every buffered point; returns once the coordinator stored them."""
    _check(_load().trainctl_flush_metrics())
