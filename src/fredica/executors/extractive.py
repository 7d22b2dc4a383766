"""The local AI_ANALYZE backend: extractive summary, keywords and chapters in pure Python.

No key, no server, no model: it works on every node, so a pipeline always gets an analysis.
- Summary: TextRank over sentences (Mihalcea & Tarau 2004): sentences are nodes, edges weigh
  the shared content words normalised by sentence lengths, PageRank picks the central ones,
  which are returned in their original order.
- Tags: TextRank over a word co-occurrence graph (window 4); adjacent keywords in the text are
  joined into phrases ("media cluster").
- Chapters: a TextTiling-style cut of the timed segments where the vocabulary changes most,
  each titled by its most central sentence.
Chinese/Japanese text is tokenised into character bigrams (no dictionary needed).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from typing import Any

BACKEND = "local-extractive"
DAMPING = 0.85
MAX_SENTENCES = 1200  # bounds the O(n^2) similarity matrix
WINDOW = 4
TITLE_CHARS = 72

_STOPWORD_TEXT = """
    every another finally first second next last something anything nothing
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further get got had has have having he her here hers herself him himself his how i if in
    into is it its itself just let like me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own really right same she should so some such
    than that the their theirs them themselves then there these they this those through to too
    under until up us very was we well were what when where which while who whom why will with
    would yes yet you your yours yourself yourselves okay oh um uh going gonna thing things
    one two three lot say said says see make made know think want way also back even still
    much many may might must shall today now here there
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]|\d+(?:\.\d+)?")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def split_sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_END.split(text.replace("\n", " "))]
    return [p for p in parts if p]


def tokenize(text: str) -> list[str]:
    """Content tokens: lower-cased words without stopwords; CJK runs as character bigrams."""
    tokens = [
        w.lower().strip("'-")
        for w in _WORD.findall(text)
        if w.lower() not in STOPWORDS and len(w) > 2 and not w[0].isdigit()
    ]
    for run in _CJK.findall(text):
        tokens.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return tokens


def pagerank(weights: list[dict[int, float]], iterations: int = 60) -> list[float]:
    """Weighted PageRank over an adjacency list (`weights[i][j]` = weight of edge i-j)."""
    n = len(weights)
    if n == 0:
        return []
    out_sum = [sum(edges.values()) for edges in weights]
    score = [1.0 / n] * n
    for _ in range(iterations):
        new = [(1 - DAMPING) / n] * n
        for i, edges in enumerate(weights):
            if out_sum[i] == 0:
                continue
            share = DAMPING * score[i] / out_sum[i]
            for j, w in edges.items():
                new[j] += share * w
        delta = sum(abs(a - b) for a, b in zip(new, score, strict=True))
        score = new
        if delta < 1e-7:
            break
    return score


def rank_sentences(sentences: list[str]) -> list[float]:
    token_sets = [set(tokenize(s)) for s in sentences]
    weights: list[dict[int, float]] = [{} for _ in sentences]
    for i, a in enumerate(token_sets):
        if len(a) < 1:
            continue
        for j in range(i + 1, len(token_sets)):
            b = token_sets[j]
            shared = len(a & b)
            if not shared:
                continue
            w = shared / (math.log(len(a) + 1) + math.log(len(b) + 1))
            weights[i][j] = w
            weights[j][i] = w
    scores = pagerank(weights)
    # a sentence with no shared words still deserves a rank by its own content
    return [s + 1e-6 * len(t) for s, t in zip(scores, token_sets, strict=True)]


def summarize(text: str, max_sentences: int = 5) -> list[str]:
    sentences = split_sentences(text)[:MAX_SENTENCES]
    if len(sentences) <= max_sentences:
        return sentences
    scores = rank_sentences(sentences)
    best = sorted(range(len(sentences)), key=lambda i: -scores[i])[:max_sentences]
    return [sentences[i] for i in sorted(best)]


def keywords(text: str, max_tags: int = 8) -> list[str]:
    """TextRank keywords, adjacent ones merged into phrases, most important first."""
    tokens = tokenize(text)
    if not tokens:
        return []
    vocab = {w: i for i, w in enumerate(dict.fromkeys(tokens))}
    words = list(vocab)
    weights: list[dict[int, float]] = [{} for _ in words]
    for pos, word in enumerate(tokens):
        for other in tokens[pos + 1 : pos + WINDOW]:
            if other != word:
                i, j = vocab[word], vocab[other]
                weights[i][j] = weights[i].get(j, 0.0) + 1.0
                weights[j][i] = weights[j].get(i, 0.0) + 1.0
    scores = pagerank(weights)
    freq = Counter(tokens)
    rank = {w: scores[vocab[w]] * (1 + math.log(freq[w])) for w in words}
    top = set(sorted(words, key=lambda w: -rank[w])[: max(max_tags * 2, len(words) // 3)])
    # phrases: runs of top words that are adjacent in the original text (stopwords break runs)
    phrases: Counter[str] = Counter()
    raw = [w.lower() for w in _WORD.findall(text)]
    run: list[str] = []
    for w in [*raw, ""]:
        if w in top:
            run.append(w)
            continue
        for size in (2, 3):
            for start in range(len(run) - size + 1):
                phrases[" ".join(run[start : start + size])] += 1
        run = []
    scored: dict[str, float] = {w: rank[w] for w in top}
    for phrase, count in phrases.items():
        if count >= 2:
            scored[phrase] = sum(rank.get(p, 0.0) for p in phrase.split()) * 0.75
    tags: list[str] = []
    for cand in sorted(scored, key=lambda c: -scored[c]):
        if any(cand in t.split() or cand == t for t in tags):
            continue
        tags = [t for t in tags if t not in cand.split()]
        tags.append(cand)
        if len(tags) >= max_tags:
            break
    return tags


def _cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(v * b[k] for k, v in a.items() if k in b)
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def _title(text: str) -> str:
    best = summarize(text, 1)
    title = best[0] if best else text
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def chapters(segments: list[dict[str, Any]], target_sec: float = 300.0) -> list[dict[str, Any]]:
    """Chapters at the strongest vocabulary shifts (TextTiling), about one per `target_sec`."""
    segs = [s for s in segments if str(s.get("text", "")).strip()]
    if not segs:
        return []
    start, end = float(segs[0]["start"]), float(segs[-1]["end"])
    wanted = max(1, min(12, round((end - start) / target_sec)))
    cuts: list[int] = []
    if wanted > 1 and len(segs) >= 4:
        bags = [Counter(tokenize(str(s["text"]))) for s in segs]
        depth: list[tuple[float, int]] = []
        for gap in range(1, len(segs)):
            left: Counter[str] = sum((bags[k] for k in range(max(0, gap - 3), gap)), Counter())
            right: Counter[str] = sum(
                (bags[k] for k in range(gap, min(len(segs), gap + 3))), Counter()
            )
            depth.append((1.0 - _cosine(left, right), gap))
        min_gap = (end - start) / (wanted * 2)
        for _score, gap in sorted(depth, reverse=True):
            t = float(segs[gap]["start"])
            if (
                all(abs(t - float(segs[c]["start"])) >= min_gap for c in cuts)
                and t - start >= min_gap
            ):
                cuts.append(gap)
            if len(cuts) >= wanted - 1:
                break
    bounds = [0, *sorted(cuts), len(segs)]
    out: list[dict[str, Any]] = []
    for a, b in itertools.pairwise(bounds):
        part = segs[a:b]
        text = " ".join(str(s["text"]).strip() for s in part)
        out.append(
            {
                "start_sec": round(float(part[0]["start"]), 3),
                "end_sec": round(float(part[-1]["end"]), 3),
                "title": _title(text),
                "keywords": keywords(text, 4),
            }
        )
    return out


def analyze(
    text: str,
    segments: list[dict[str, Any]] | None = None,
    *,
    max_sentences: int = 5,
    max_tags: int = 8,
    chapter_sec: float = 300.0,
) -> dict[str, Any]:
    """{summary, tags, chapters, backend}: the whole local analysis (pure function)."""
    summary = summarize(text, max_sentences)
    return {
        "summary": " ".join(summary),
        "summary_sentences": summary,
        "tags": keywords(text, max_tags),
        "chapters": chapters(segments or [], chapter_sec),
        "backend": BACKEND,
    }


def analyze_in_child(
    reporter: Any, text: str, segments: list[dict[str, Any]], opts: dict[str, Any]
) -> dict[str, Any]:
    """Child-process entry point (CPU work stays off the node's event loop)."""
    reporter.progress(10, "ranking sentences")
    return analyze(text, segments, **opts)
