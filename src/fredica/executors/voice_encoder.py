"""Resemblyzer's speaker encoder run in numpy (the `resemblyzer-cpu` diarization backend).

The `resemblyzer==0.1.4` wheel ships `pretrained.pt`, a GE2E voice encoder (a 3-layer LSTM,
256 hidden units, over 40-band mel spectrograms of 25 ms windows every 10 ms, then a linear
layer, ReLU and L2 norm: a 256-d unit vector per stretch of speech). Its own code needs torch,
webrtcvad and librosa, none of which fredica installs; this module reads the weights without
torch and runs the same network and the same features:

- `load_weights` reads the legacy torch pickle format (a magic number, a protocol version, the
  system info, the object pickle whose tensors point at storages by key, the list of storage
  keys, then each storage as an int64 element count and raw little-endian float32 data);
- `mel_spectrogram` is librosa's `melspectrogram` at resemblyzer's settings (Hann window of
  400 samples, hop 160, centred with reflect padding, power 2, Slaney mel filters 0–8 kHz);
- `VoiceEncoder.embed` is the forward pass of `resemblyzer.VoiceEncoder` (PyTorch's LSTM gate
  order i, f, g, o; the last layer's final hidden state -> linear -> ReLU -> L2 norm).
"""

from __future__ import annotations

import importlib.util
import pickle
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import numpy as np

from fredica.domain import errors

RATE = 16_000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s: the length the encoder was trained on
NORM_DBFS = -30.0
MODEL = "resemblyzer-0.1.4 voice encoder"
_MAGIC = 0x1950A86A20F9469CFC6C


def weights_path() -> Path:
    """`pretrained.pt` inside the installed resemblyzer package (found without importing it:
    its `__init__` imports torch)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise errors.ResourceError("python package resemblyzer is not installed (make venv)")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.is_file():
        raise errors.ResourceError(f"resemblyzer is installed but {path} is missing")
    return path


@dataclass(slots=True)
class _TensorRef:
    key: str
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class _Storage:
    """Stands for torch.FloatStorage in the pickle: only float32 storages are expected."""


def _rebuild(storage: str, offset: int, shape: tuple[int, ...], stride: tuple[int, ...],
             *_: Any) -> _TensorRef:  # fmt: skip
    return _TensorRef(storage, offset, tuple(shape), tuple(stride))


class _Unpickler(pickle.Unpickler):
    ALLOWED: ClassVar[dict[tuple[str, str], Callable[..., Any] | type]] = {
        ("collections", "OrderedDict"): OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild,
        ("torch", "FloatStorage"): _Storage,
    }

    def find_class(self, module: str, name: str) -> Any:
        found = self.ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"unexpected {module}.{name} in the weights file")
        return found

    def persistent_load(self, pid: Any) -> str:
        if not (isinstance(pid, tuple) and pid[0] == "storage" and pid[1] is _Storage):
            raise pickle.UnpicklingError(f"unexpected storage {pid!r:.80} in the weights file")
        return str(pid[2])


def _read_storages(f: BinaryIO, keys: list[str]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key in keys:
        count = int(np.frombuffer(f.read(8), dtype="<i8")[0])
        out[key] = np.frombuffer(f.read(4 * count), dtype="<f4", count=count)
    return out


def load_weights(path: Path) -> dict[str, np.ndarray]:
    """The `model_state` of a legacy-format torch checkpoint as float32 arrays."""
    with path.open("rb") as f:
        if pickle.load(f) != _MAGIC or pickle.load(f) != 1001:
            raise errors.ResourceError(f"{path} is not a legacy torch checkpoint")
        pickle.load(f)  # system info: little endian was checked by the writer's platform
        checkpoint = _Unpickler(f).load()
        storages = _read_storages(f, list(pickle.load(f)))
    state: dict[str, np.ndarray] = {}
    for name, ref in checkpoint["model_state"].items():
        data = storages[ref.key]
        strides = tuple(4 * s for s in ref.stride)
        view = np.lib.stride_tricks.as_strided(data[ref.offset :], ref.shape, strides)
        state[name] = np.array(view, dtype=np.float32)
    return state


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """The Slaney mel scale (librosa's default): linear below 1 kHz, logarithmic above."""
    sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / sp, np.log(6.4) / 27.0
    mel = hz / sp
    high = hz >= min_log_hz
    mel[high] = min_log_mel + np.log(hz[high] / min_log_hz) / logstep
    return mel


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / sp, np.log(6.4) / 27.0
    hz = sp * mel
    high = mel >= min_log_mel
    hz[high] = min_log_hz * np.exp(logstep * (mel[high] - min_log_mel))
    return hz


def mel_filters() -> np.ndarray:
    """(N_MELS, N_FFT // 2 + 1) Slaney-normalised triangular filters, as librosa.filters.mel."""
    freqs = np.fft.rfftfreq(N_FFT, 1.0 / RATE)
    edges = _mel_to_hz(np.linspace(0.0, _hz_to_mel(np.array([RATE / 2.0]))[0], N_MELS + 2))
    diff = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    weights = np.zeros((N_MELS, len(freqs)))
    for i in range(N_MELS):
        lower, upper = -ramps[i] / diff[i], ramps[i + 2] / diff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2 : N_MELS + 2] - edges[:N_MELS]))[:, None]
    return weights


_FILTERS = mel_filters()


def mel_spectrogram(wav: np.ndarray) -> np.ndarray:
    """(frames, N_MELS) power mel spectrogram, one frame per 10 ms (not logarithmic)."""
    padded = np.pad(wav.astype(np.float64), N_FFT // 2, mode="reflect")
    count = 1 + (len(padded) - N_FFT) // HOP
    index = np.arange(N_FFT)[None, :] + HOP * np.arange(count)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    power = np.abs(np.fft.rfft(padded[index] * window, axis=1)) ** 2
    mel: np.ndarray = (power @ _FILTERS.T).astype(np.float32)
    return mel


def normalise_volume(wav: np.ndarray) -> np.ndarray:
    """Raise quiet audio to -30 dBFS (never lowered), as resemblyzer's preprocessing does."""
    rms = float(np.sqrt(np.mean(wav.astype(np.float64) ** 2)))
    if rms <= 0:
        return wav
    change = NORM_DBFS - 20 * np.log10(rms)
    out: np.ndarray = wav if change < 0 else (wav * 10 ** (change / 20)).astype(np.float32)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * x))
    return out


class VoiceEncoder:
    """The encoder network with the wheel's weights."""

    def __init__(self, weights: dict[str, np.ndarray] | None = None) -> None:
        w = weights if weights is not None else load_weights(weights_path())
        self.layers = [
            (
                w[f"lstm.weight_ih_l{k}"].T.copy(),
                w[f"lstm.weight_hh_l{k}"].T.copy(),
                w[f"lstm.bias_ih_l{k}"] + w[f"lstm.bias_hh_l{k}"],
            )
            for k in range(3)
        ]
        self.linear_w = w["linear.weight"].T.copy()
        self.linear_b = w["linear.bias"]

    def embed(self, mels: np.ndarray) -> np.ndarray:
        """(batch, frames, N_MELS) mel spectrograms -> (batch, 256) unit-norm embeddings."""
        x = mels.astype(np.float32)
        batch, steps, _ = x.shape
        h = np.zeros((batch, 0), dtype=np.float32)
        for w_ih, w_hh, bias in self.layers:
            hidden = w_hh.shape[0]
            gates_in = x @ w_ih + bias  # (batch, steps, 4H)
            h = np.zeros((batch, hidden), dtype=np.float32)
            c = np.zeros((batch, hidden), dtype=np.float32)
            out = np.empty((batch, steps, hidden), dtype=np.float32)
            for t in range(steps):
                g = gates_in[:, t] + h @ w_hh
                i, f = _sigmoid(g[:, :hidden]), _sigmoid(g[:, hidden : 2 * hidden])
                cand, o = np.tanh(g[:, 2 * hidden : 3 * hidden]), _sigmoid(g[:, 3 * hidden :])
                c = f * c + i * cand
                h = o * np.tanh(c)
                out[:, t] = h
            x = out
        raw = np.maximum(h @ self.linear_w + self.linear_b, 0.0)
        norm = np.linalg.norm(raw, axis=1, keepdims=True)
        embeds: np.ndarray = raw / np.maximum(norm, 1e-9)
        return embeds
