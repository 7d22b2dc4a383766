"""Perceptual hashes of video frames (FINGERPRINT_VIDEO, seed 001 §3.14) and their comparison.

The classic DCT pHash: a frame scaled to 32x32 grey (ffmpeg does that), its 2-D DCT-II, the
8x8 lowest frequencies, one bit per coefficient: above the median of those 64 or not. Re-encoding,
rescaling and mild colour changes move few bits; different pictures differ in about half.
Two videos are compared by sliding one hash list over the other (the copy may start a few
seconds later) and taking the best mean Hamming distance of the overlapping frames.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

SIDE = 32  # the frame is scaled to SIDE x SIDE grey pixels
LOW = 8  # LOW x LOW lowest DCT frequencies -> 64 bits
BITS = LOW * LOW
ALGORITHM = f"phash-dct{SIDE}-{LOW}x{LOW}"
MAX_SHIFT_SEC = 10  # how far apart two copies may start (in hash steps)
MIN_OVERLAP = 3  # frames that must overlap for a shift to count


@functools.cache
def _dct_matrix(n: int) -> npt.NDArray[np.float64]:
    """Orthonormal DCT-II matrix: row k holds cos(pi * (2i + 1) * k / 2n)."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    m = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    m[0, :] = np.sqrt(1.0 / n)
    out: npt.NDArray[np.float64] = m
    return out


def hash_frame(gray: npt.NDArray[Any]) -> str:
    """The 64-bit pHash (16 hex digits) of one SIDE x SIDE grey frame."""
    d = _dct_matrix(SIDE)
    coeffs = d @ gray.astype(np.float64) @ d.T
    low = coeffs[:LOW, :LOW].flatten()
    bits = low > np.median(low)
    value = 0
    for bit in bits:
        value = (value << 1) | int(bit)
    return f"{value:016x}"


def hash_raw_frames(raw: bytes) -> list[str]:
    """Hashes of consecutive SIDE x SIDE 8-bit grey frames (ffmpeg `-f rawvideo gray`)."""
    size = SIDE * SIDE
    count = len(raw) // size
    frames = np.frombuffer(raw[: count * size], dtype=np.uint8).reshape(count, SIDE, SIDE)
    return [hash_frame(f) for f in frames]


def distance(a: str, b: str) -> int:
    """Hamming distance of two hex hashes (0 = same, about 32 = unrelated pictures)."""
    return (int(a, 16) ^ int(b, 16)).bit_count()


def compare(a: Sequence[str], b: Sequence[str], max_shift: int = MAX_SHIFT_SEC) -> dict[str, Any]:
    """How alike two hash lists are: the best mean Hamming distance over the shifts of one
    against the other, and `similarity` = 1 - distance / 32 clipped to [0, 1] (1 = same
    pictures, 0 = as different as unrelated pictures)."""
    if not a or not b:
        raise ValueError("both fingerprints need at least one frame hash")
    best: tuple[float, int, int] | None = None  # (mean distance, shift, overlap)
    min_overlap = min(MIN_OVERLAP, len(a), len(b))
    for shift in range(-max_shift, max_shift + 1):
        pairs = [(a[i], b[i + shift]) for i in range(len(a)) if 0 <= i + shift < len(b)]
        if len(pairs) < min_overlap:
            continue
        mean = sum(distance(x, y) for x, y in pairs) / len(pairs)
        if best is None or mean < best[0]:
            best = (mean, shift, len(pairs))
    if best is None:
        raise ValueError("the fingerprints do not overlap")
    mean, shift, overlap = best
    return {
        "mean_distance": round(mean, 2),
        "similarity": round(max(0.0, min(1.0, 1 - mean / (BITS / 2))), 3),
        "shift_frames": shift,
        "overlap_frames": overlap,
        "frames_a": len(a),
        "frames_b": len(b),
    }
