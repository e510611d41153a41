"""TensorBoard for the Trial API: context.get_tensorboard_writer() and the metrics the Trainer
writes there (Determined's names: `Determined/<metric>` for training, `Determined/val_<metric>`
for validation, x = batches trained).

The writer is torch's SummaryWriter when the `tensorboard` package is installed, else
ScalarWriter below: det's own writer of TensorBoard event files (TFRecord framing of
tensorflow.Event protos) that knows scalars, which is what training scripts log most; its other
add_* methods say that they need the tensorboard package. The files land in
TrainContext.get_tensorboard_path(), which det.core copies into the checkpoint storage."""

import os
import socket
import struct
import threading
import time
from typing import Any, BinaryIO, Dict, Optional

_CRC_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord framing."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 as protobuf writes it: two's complement, 10 bytes if < 0.
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, *, file_version: str = "",
           scalars: Optional[Dict[str, float]] = None) -> bytes:
    """A tensorflow.Event: wall_time (1, double), step (2, int64), file_version (3, string) or
    summary (5, Summary { repeated Value value = 1 { tag = 1; simple_value = 2 (float) } })."""
    out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3) + _varint(step)
    if file_version:
        out += _field_bytes(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _field_bytes(1, _field_bytes(1, tag.encode()) + _varint(2 << 3 | 5) +
                         struct.pack("<f", value))
            for tag, value in scalars.items())
        out += _field_bytes(5, summary)
    return out


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", _masked_crc(length)) + data +
            struct.pack("<I", _masked_crc(data)))


class ScalarWriter:
    """Writes scalars to a TensorBoard event file in `log_dir` (created when missing), with
    the add_scalar / add_scalars / flush / close of torch's SummaryWriter. Thread-safe."""

    def __init__(self, log_dir: str, filename_suffix: str = "") -> None:
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = str(log_dir)
        name = "events.out.tfevents.%010d.%s.%d.%d%s" % (
            time.time(), socket.gethostname(), os.getpid(), id(self) % 1000, filename_suffix)
        self._lock = threading.Lock()
        self._file: Optional[BinaryIO] = open(os.path.join(self.log_dir, name), "ab")
        self._write(_event(time.time(), 0, file_version="brain.Event:2"))

    def get_logdir(self) -> str:
        return self.log_dir

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self._file is None:
                raise ValueError("the TensorBoard writer is closed")
            self._file.write(_record(data))

    def add_scalar(self, tag: str, scalar_value: Any, global_step: Optional[int] = None,
                   walltime: Optional[float] = None, **_unused: Any) -> None:
        """One point of the series `tag` at `global_step` (0 when None). `scalar_value`: a
        number or a one-element tensor / array."""
        value = float(scalar_value.item() if hasattr(scalar_value, "item") else scalar_value)
        self._write(_event(time.time() if walltime is None else walltime,
                           int(global_step or 0), scalars={str(tag): value}))

    def add_scalars(self, main_tag: str, tag_scalar_dict: Dict[str, Any],
                    global_step: Optional[int] = None, walltime: Optional[float] = None) -> None:
        """Each item as the series `main_tag/key` (torch writes each to a run directory of its
        own; TensorBoard shows both forms)."""
        for key, value in tag_scalar_dict.items():
            self.add_scalar(f"{main_tag}/{key}", value, global_step, walltime)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> "ScalarWriter":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("add_"):
            def unsupported(*_args: Any, **_kwargs: Any) -> None:
                raise NotImplementedError(
                    f"{name}: det's own TensorBoard writer writes scalars only; install the "
                    "`tensorboard` package in the workers' Python for torch's SummaryWriter")
            return unsupported
        raise AttributeError(name)


def summary_writer(log_dir: str) -> Any:
    """torch's SummaryWriter on `log_dir` when the tensorboard package is importable, else a
    ScalarWriter."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return ScalarWriter(log_dir)
    return SummaryWriter(log_dir)


def log_metrics(writer: Any, group: str, steps: int, metrics: Dict[str, Any]) -> None:
    """`metrics` of `group` ("training" or "validation") at batch `steps`, in Determined's
    naming: Determined/<name>, with val_ before validation names that lack it; non-numbers are
    left out."""
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if group == "validation" and not name.startswith("val_"):
            name = "val_" + name
        writer.add_scalar("Determined/" + name, value, steps)
    writer.flush()
