"""Speaker diarization: `builtin-mfcc-cluster` (no model, pure numpy; steps 1-4 below) and
`resemblyzer-cpu` (the same speech regions and turns, with a trained speaker encoder's
embeddings clustered instead of MFCC voice prints; see the end of this module).

1. Speech regions: 10 ms frames marked by energy (as SYNC_SUBTITLE does), pauses shorter than
   `BRIDGE_SEC` bridged, blips shorter than `MIN_REGION_SEC` dropped.
2. Voice prints: MFCCs (25 ms windows, 40 mel bands, 19 coefficients without c0) summarised
   as mean and standard deviation over 1 s windows sliding by 0.25 s inside the regions.
3. Clustering: k-means (k-means++ seeding with a fixed seed: same input, same answer) for every
   k in [min_speakers, max_speakers]; the k with the best silhouette wins, and a single speaker
   is chosen when no split reaches `MIN_SILHOUETTE`.
4. Turns: each frame takes the label of the windows covering it; runs of one label form
   segments, and segments shorter than `min_segment_sec` join their neighbour.

It separates clearly different voices in clean recordings (interviews, podcasts, generated
dialogue); overlapping speech and similar voices need a neural backend (resemblyzer-cpu, pyannote),
which the scheduler prefers whenever a node declares one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

RATE = 16_000
HOP = 0.01
WIN = 0.025
N_FFT = 512
N_MELS = 40
N_MFCC = 20
BRIDGE_SEC = 0.3
MIN_REGION_SEC = 0.2
PRINT_SEC, PRINT_HOP_SEC = 1.0, 0.25
MIN_SILHOUETTE = 0.2
SEED = 7


@dataclass(frozen=True, slots=True)
class Segment:
    speaker: int
    start: float
    end: float


def _mel_filters(rate: int = RATE) -> np.ndarray:
    def mel(f: np.ndarray) -> np.ndarray:
        out: np.ndarray = 2595 * np.log10(1 + f / 700)
        return out

    top = mel(np.array([rate / 2]))[0]
    points = 700 * (10 ** (np.linspace(0, top, N_MELS + 2) / 2595) - 1)
    bins = np.floor((N_FFT + 1) * points / rate).astype(int)
    filters = np.zeros((N_MELS, N_FFT // 2 + 1))
    for m in range(1, N_MELS + 1):
        lo, mid, hi = bins[m - 1], bins[m], bins[m + 1]
        filters[m - 1, lo:mid] = (np.arange(lo, mid) - lo) / max(1, mid - lo)
        filters[m - 1, mid:hi] = (hi - np.arange(mid, hi)) / max(1, hi - mid)
    return filters


def mfcc(samples: np.ndarray, rate: int = RATE) -> np.ndarray:
    """(frames, N_MFCC - 1) cepstra every HOP seconds (c0, the loudness, left out)."""
    hop, win = int(rate * HOP), int(rate * WIN)
    emphasised = np.append(samples[:1], samples[1:] - 0.97 * samples[:-1])
    count = max(0, 1 + (len(emphasised) - win) // hop)
    if count == 0:
        return np.zeros((0, N_MFCC - 1))
    index = np.arange(win)[None, :] + hop * np.arange(count)[:, None]
    frames = emphasised[index] * np.hamming(win)
    power = np.abs(np.fft.rfft(frames, N_FFT)) ** 2 / N_FFT
    energies = np.log(power @ _mel_filters(rate).T + 1e-10)
    n = np.arange(N_MELS)
    dct = np.cos(np.pi / N_MELS * (n[None, :] + 0.5) * np.arange(N_MFCC)[:, None])
    cepstra: np.ndarray = (energies @ dct.T)[:, 1:]
    return cepstra


def regions(voiced: np.ndarray) -> list[tuple[int, int]]:
    """Speech regions as frame ranges, short pauses bridged and blips dropped."""
    found: list[tuple[int, int]] = []
    start = None
    for i, v in enumerate(np.append(voiced, 0)):
        if v and start is None:
            start = i
        elif not v and start is not None:
            found.append((start, i))
            start = None
    bridged: list[tuple[int, int]] = []
    for lo, hi in found:
        if bridged and (lo - bridged[-1][1]) * HOP < BRIDGE_SEC:
            bridged[-1] = (bridged[-1][0], hi)
        else:
            bridged.append((lo, hi))
    return [(lo, hi) for lo, hi in bridged if (hi - lo) * HOP >= MIN_REGION_SEC]


def sliding_windows(
    spans: list[tuple[int, int]], length: int, size_sec: float, step_sec: float
) -> list[tuple[int, int]]:
    """Frame ranges of `size_sec` sliding by `step_sec` inside each region (the last one ends
    at the region's end); a region shorter than that is one window."""
    size, step = int(size_sec / HOP), int(step_sec / HOP)
    windows: list[tuple[int, int]] = []
    for lo, hi in spans:
        hi = min(hi, length)
        if hi - lo <= size:
            windows.append((lo, hi))
            continue
        starts = list(range(lo, hi - size + 1, step))
        if starts[-1] + size < hi:
            starts.append(hi - size)
        windows += [(s, s + size) for s in starts]
    return [(lo, hi) for lo, hi in windows if hi > lo]


def voice_prints(
    ceps: np.ndarray, spans: list[tuple[int, int]]
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Mean + std of the cepstra over sliding windows inside each region (z-scored)."""
    windows = sliding_windows(spans, len(ceps), PRINT_SEC, PRINT_HOP_SEC)
    feats = np.array(
        [np.concatenate([ceps[lo:hi].mean(0), ceps[lo:hi].std(0)]) for lo, hi in windows]
    )
    feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-9)
    return feats, windows


def kmeans(x: np.ndarray, k: int, rounds: int = 50) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    centres = [x[rng.integers(len(x))]]
    for _ in range(1, k):
        dist = np.min([np.sum((x - c) ** 2, axis=1) for c in centres], axis=0)
        centres.append(
            x[int(np.argmax(dist))]
            if dist.sum() == 0
            else x[rng.choice(len(x), p=dist / dist.sum())]
        )
    c = np.array(centres)
    labels = np.zeros(len(x), dtype=int)
    for _ in range(rounds):
        labels = np.argmin(((x[:, None, :] - c[None, :, :]) ** 2).sum(-1), axis=1)
        new = np.array([x[labels == j].mean(0) if np.any(labels == j) else c[j] for j in range(k)])
        if np.allclose(new, c):
            break
        c = new
    return labels


def silhouette(x: np.ndarray, labels: np.ndarray) -> float:
    k = labels.max() + 1
    if k < 2:
        return 0.0
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    scores = []
    for i in range(len(x)):
        own = labels == labels[i]
        if own.sum() <= 1:
            scores.append(0.0)
            continue
        a = d[i, own].sum() / (own.sum() - 1)
        b = min(
            d[i, labels == j].mean() for j in range(k) if j != labels[i] and np.any(labels == j)
        )
        scores.append((b - a) / max(a, b))
    return float(np.mean(scores))


def cluster(x: np.ndarray, min_k: int, max_k: int) -> np.ndarray:
    """Labels for the voice prints: the k in [min_k, max_k] with the best silhouette."""
    if len(x) < 2 or max_k <= 1:
        return np.zeros(len(x), dtype=int)
    best_labels, best_score = np.zeros(len(x), dtype=int), MIN_SILHOUETTE if min_k <= 1 else -1.0
    for k in range(max(2, min_k), min(max_k, len(x)) + 1):
        labels = kmeans(x, k)
        score = silhouette(x, labels)
        if score > best_score:
            best_labels, best_score = labels, score
    return best_labels


def turns(
    voiced_len: int,
    windows: list[tuple[int, int]],
    labels: np.ndarray,
    spans: list[tuple[int, int]],
    min_segment_sec: float,
) -> list[Segment]:
    """Segments from the window labels: frames vote, runs become segments, short ones merge."""
    k = int(labels.max()) + 1 if len(labels) else 1
    votes = np.zeros((voiced_len, k))
    for (lo, hi), label in zip(windows, labels, strict=True):
        votes[lo:hi, label] += 1
    segments: list[Segment] = []
    for lo, hi in spans:
        hi = min(hi, voiced_len)
        frame_labels = np.argmax(votes[lo:hi], axis=1)
        start = lo
        for i in range(lo + 1, hi + 1):
            if i == hi or frame_labels[i - lo] != frame_labels[start - lo]:
                segments.append(Segment(int(frame_labels[start - lo]), start * HOP, i * HOP))
                start = i
    return merge_short(segments, min_segment_sec)


def merge_short(segments: list[Segment], min_segment_sec: float) -> list[Segment]:
    """Segments shorter than `min_segment_sec` take their longer neighbour's speaker; touching
    segments of one speaker become one. Speakers are renumbered by first appearance."""
    out = list(segments)
    changed = True
    while changed and len(out) > 1:
        changed = False
        for i, seg in enumerate(out):
            if seg.end - seg.start >= min_segment_sec:
                continue
            prev = out[i - 1] if i > 0 else None
            nxt = out[i + 1] if i + 1 < len(out) else None
            pick = max((p for p in (prev, nxt) if p is not None), key=lambda p: p.end - p.start)
            if pick.speaker != seg.speaker:
                out[i] = Segment(pick.speaker, seg.start, seg.end)
                changed = True
        joined: list[Segment] = []
        for seg in out:
            if (
                joined
                and joined[-1].speaker == seg.speaker
                and seg.start - joined[-1].end < BRIDGE_SEC * 4
            ):
                joined[-1] = Segment(seg.speaker, joined[-1].start, seg.end)
            else:
                joined.append(seg)
        changed = changed or len(joined) != len(out)
        out = joined
    order: dict[int, int] = {}
    for seg in out:
        order.setdefault(seg.speaker, len(order))
    return [Segment(order[s.speaker], round(s.start, 2), round(s.end, 2)) for s in out]


def diarize(
    samples: np.ndarray,
    voiced: np.ndarray,
    min_speakers: int,
    max_speakers: int,
    min_segment_sec: float,
    encoder: Any = None,
) -> list[Segment]:
    """Speaker turns of 16 kHz mono `samples` given their 10 ms speech marks: from the voice
    encoder's embeddings of sliding windows when `encoder` is given (`resemblyzer-cpu`), from
    MFCC voice prints otherwise (`builtin-mfcc-cluster`)."""
    spans = regions(voiced)
    if not spans:
        return []
    if encoder is not None:
        length = len(samples) // int(RATE * HOP)
        windows = sliding_windows(spans, length, EMBED_WIN_SEC, EMBED_HOP_SEC)  # 1.6 s: trained on
        labels = cluster_embeddings(embed_windows(encoder, samples, windows), min_speakers,
                                    max_speakers)  # fmt: skip
        return turns(length, windows, labels, spans, min_segment_sec)
    ceps = mfcc(samples)
    feats, windows = voice_prints(ceps, spans)
    labels = cluster(feats, min_speakers, max_speakers)
    return turns(len(ceps), windows, labels, spans, min_segment_sec)


# --- the `resemblyzer-cpu` backend: a trained speaker encoder's embeddings --------------------
EMBED_WIN_SEC, EMBED_HOP_SEC = 1.6, 0.2
EMBED_BATCH = 64
SAME_VOICE_COSINE = 0.8  # two halves whose centroids are closer than this are one voice
REFINE_ROUNDS = 10
SILHOUETTE_SLACK = 0.05


def embed_windows(encoder: Any, samples: np.ndarray, windows: list[tuple[int, int]]) -> np.ndarray:
    """(windows, 256) unit embeddings; windows of one length go through the network together."""
    from fredica.executors import voice_encoder as ve

    mel = ve.mel_spectrogram(ve.normalise_volume(samples))
    out = np.zeros((len(windows), 256), dtype=np.float32)
    by_length: dict[int, list[int]] = {}
    for i, (lo, hi) in enumerate(windows):
        by_length.setdefault(min(hi, len(mel)) - lo, []).append(i)
    for length, members in by_length.items():
        for at in range(0, len(members), EMBED_BATCH):
            chunk = members[at : at + EMBED_BATCH]
            batch = np.stack([mel[windows[i][0] : windows[i][0] + length] for i in chunk])
            out[chunk] = encoder.embed(batch)
    return out


def _cosine_silhouette(sim: np.ndarray, labels: np.ndarray) -> float:
    dist = 1.0 - sim
    k = int(labels.max()) + 1
    if k < 2:
        return 0.0
    scores = np.zeros(len(labels))
    for i in range(len(labels)):
        own = labels == labels[i]
        if own.sum() <= 1:
            continue
        a = dist[i, own].sum() / (own.sum() - 1)
        b = min(dist[i, labels == j].mean() for j in range(k) if j != labels[i])
        scores[i] = (b - a) / max(a, b, 1e-9)
    return float(scores.mean())


def _refine(embeds: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Spherical k-means from the agglomerative labels: each window joins its nearest centroid."""
    k = int(labels.max()) + 1
    for _ in range(REFINE_ROUNDS):
        centres = np.stack([embeds[labels == j].mean(0) for j in range(k)])
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        new = np.argmax(embeds @ centres.T, axis=1)
        if np.array_equal(new, labels) or len(set(new.tolist())) < k:
            break
        labels = new
    return labels


def cluster_embeddings(embeds: np.ndarray, min_k: int, max_k: int) -> np.ndarray:
    """Average-linkage agglomerative clustering on cosine distance, cut at every k in
    [min_k, max_k] and refined; the speaker count is the smallest k whose cosine silhouette is
    within SILHOUETTE_SLACK of the best (overlapping windows of one utterance agree so closely
    that splitting a voice by utterance scores nearly as well as the right count). One speaker
    when min_k is 1 and the centroids of the best split in two are closer than
    SAME_VOICE_COSINE (measured on espeak-ng voices: one voice split in two >= 0.89, two
    voices <= 0.70)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if len(embeds) < 2 or max_k <= 1:
        return np.zeros(len(embeds), dtype=int)
    tree = linkage(embeds.astype(np.float64), method="average", metric="cosine")
    sim = embeds @ embeds.T
    scored: list[tuple[int, float, np.ndarray]] = []
    for k in range(max(2, min_k), min(max_k, len(embeds)) + 1):
        labels = fcluster(tree, k, criterion="maxclust") - 1
        if int(labels.max()) + 1 < k:
            continue
        labels = _refine(embeds, labels)
        scored.append((k, _cosine_silhouette(sim, labels), labels))
    if not scored:
        return np.zeros(len(embeds), dtype=int)
    if min_k <= 1 and scored[0][0] == 2:
        halves = scored[0][2]
        centres = np.stack([embeds[halves == j].mean(0) for j in range(2)])
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        if float(centres[0] @ centres[1]) > SAME_VOICE_COSINE:
            return np.zeros(len(embeds), dtype=int)
    top = max(score for _, score, _ in scored)
    return next(labels for _, score, labels in scored if score >= top - SILHOUETTE_SLACK)
