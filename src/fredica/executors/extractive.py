"""The local AI_ANALYZE backend: extractive summary, keywords and chapters in pure Python.

No key, no server, no model: it works on every node, so a pipeline always gets an analysis.
- Summary: TextRank over sentences (Mihalcea & Tarau 2004): sentences are nodes, edges weigh
  the shared content words normalised by sentence lengths, PageRank picks the central ones,
  which are returned in their original order.
- Tags: TextRank over a word co-occurrence graph (window 4); adjacent keywords in the text are
  joined into phrases ("media cluster").
- Chapters: a TextTiling-style cut of the timed segments where the vocabulary changes most,
  each titled by its most central sentence.
Words of any alphabet are tokens (Unicode letters); Chinese/Japanese/Korean text is tokenised
into character bigrams (no dictionary needed). Stopwords: the list of the text's language
(English, German, Spanish, French, Italian, Portuguese, Dutch; given or guessed from which list
covers most of the words), or, for any other language, the words found in most sentences.
Chapters are scaled to the media's length (a fifth of it, 1-5 minutes each).
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
MIN_CHAPTER_SEC = 60.0
MAX_CHAPTER_SEC = 300.0

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
_OTHER_STOPWORDS = {
    "de": """der die das den dem des ein eine einen einem einer eines und oder aber auch als
        an auf aus bei bis durch für gegen in im ins mit nach ohne über um unter von vor zu zum
        zur ist sind war waren wird werden wurde hat haben hatte sein ich du er sie es wir ihr
        man sich nicht kein keine noch nur schon sehr so wie wo was wer wenn dass daß denn
        doch da dann hier dort mehr viel viele alle jeder jede dieser diese dieses jener kann
        können muss müssen soll will wollen ihre ihren ihrem sein seine seinen oft heute""",
    "es": """el la los las un una unos unas y o pero también como en de del al a con sin
        por para sobre entre hasta desde que se su sus lo le les me te nos es son era eran
        fue ser estar está están hay ha han había muy más menos ya no sí cuando donde este
        esta estos estas ese esa esos esas otro otra otros todo todos cada mi tu yo él ella
        ellos ellas nosotros porque si tan hoy""",
    "fr": """le la les un une des et ou mais aussi comme en de du au aux à avec sans par
        pour sur dans entre que qui se sa son ses leur leurs il elle ils elles nous vous je
        tu on est sont était être avoir a ont ne pas plus très ce cette ces tout tous chaque
        où quand si donc""",
    "it": """il lo la i gli le un uno una e o ma anche come in di del della dei al a da con
        senza per su tra che si suo sua suoi loro è sono era essere avere ha hanno non più
        molto questo questa questi quello ogni dove quando se""",
    "pt": """o a os as um uma e ou mas também como em de do da dos das ao à com sem por
        para sobre entre que se seu sua seus é são era ser estar está ter tem não mais muito
        este esta esse essa todo cada onde quando""",
    "nl": """de het een en of maar ook als in op aan met van voor naar bij uit door over
        dat die dit deze er is zijn was waren wordt worden heeft hebben niet geen nog al zeer
        zo hoe waar wat wie wanneer ik je hij zij wij jullie ze ons hun""",
}
STOPWORDS_BY_LANGUAGE: dict[str, frozenset[str]] = {
    "en": frozenset(_STOPWORD_TEXT.split()),
    **{lang: frozenset(words.split()) for lang, words in _OTHER_STOPWORDS.items()},
}
STOPWORDS = STOPWORDS_BY_LANGUAGE["en"]
COMMON_SHARE = 0.5  # language-neutral: a word in this share of the sentences is a function word

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")
# words in any alphabet (letters, inner apostrophes and hyphens); CJK is handled by bigrams
_WORD = re.compile(r"[^\W\d_]+(?:['’\-][^\W\d_]+)*|\d+(?:\.\d+)?")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def split_sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_END.split(text.replace("\n", " "))]
    return [p for p in parts if p]


def words_of(text: str) -> list[str]:
    """Lower-cased words of any alphabet (CJK runs excluded: see `tokenize`)."""
    return [w.lower() for w in _WORD.findall(text) if not _CJK.match(w)]


def guess_language(text: str) -> str | None:
    """The stopword list that covers most of the text's words (None: no list fits)."""
    found = Counter(words_of(text))
    total = sum(found.values())
    if not total:
        return None
    best = max(
        STOPWORDS_BY_LANGUAGE, key=lambda lang: sum(found[w] for w in STOPWORDS_BY_LANGUAGE[lang])
    )
    covered = sum(found[w] for w in STOPWORDS_BY_LANGUAGE[best])
    return best if covered / total >= 0.15 else None


def common_words(sentences: list[str]) -> frozenset[str]:
    """Language-neutral stopwords: words found in at least COMMON_SHARE of the sentences."""
    if len(sentences) < 8:
        return frozenset()
    df = Counter(w for s in sentences for w in set(words_of(s)))
    return frozenset(w for w, n in df.items() if n / len(sentences) >= COMMON_SHARE)


def tokenize(text: str, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Content tokens: lower-cased words without stopwords; CJK runs as character bigrams."""
    tokens = [w.strip("'-’") for w in words_of(text)]
    tokens = [w for w in tokens if w not in stopwords and len(w) > 2 and not w[0].isdigit()]
    for run in _CJK.findall(text):
        tokens.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return tokens


def stopwords_for(text: str, language: str | None = None) -> frozenset[str]:
    """Stopwords for a text: its language's list (given or guessed); for a language without a
    list, the words found in most of its sentences (its function words)."""
    lang = language if language in STOPWORDS_BY_LANGUAGE else guess_language(text)
    if lang is not None:
        return STOPWORDS_BY_LANGUAGE[lang]
    return common_words(split_sentences(text)[:MAX_SENTENCES])


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


def rank_sentences(sentences: list[str], stopwords: frozenset[str] = STOPWORDS) -> list[float]:
    token_sets = [set(tokenize(s, stopwords)) for s in sentences]
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


def summarize(
    text: str, max_sentences: int = 5, stopwords: frozenset[str] | None = None
) -> list[str]:
    sentences = split_sentences(text)[:MAX_SENTENCES]
    if len(sentences) <= max_sentences:
        return sentences
    scores = rank_sentences(sentences, stopwords_for(text) if stopwords is None else stopwords)
    best = sorted(range(len(sentences)), key=lambda i: -scores[i])[:max_sentences]
    return [sentences[i] for i in sorted(best)]


def keywords(text: str, max_tags: int = 8, stopwords: frozenset[str] | None = None) -> list[str]:
    """TextRank keywords, adjacent ones merged into phrases, most important first."""
    tokens = tokenize(text, stopwords_for(text) if stopwords is None else stopwords)
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
    scored: dict[str, float] = {w: rank[w] for w in top}
    for phrase, count in _phrases(text, top).items():
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


def _phrases(text: str, top: set[str]) -> Counter[str]:
    """Runs of 2-3 top words adjacent in the original text (stopwords break runs)."""
    phrases: Counter[str] = Counter()
    raw = [w.strip("'-’") for w in words_of(text)]
    run: list[str] = []
    for w in [*raw, ""]:
        if w in top:
            run.append(w)
            continue
        for size in (2, 3):
            for start in range(len(run) - size + 1):
                phrases[" ".join(run[start : start + size])] += 1
        run = []
    return phrases


def _cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(v * b[k] for k, v in a.items() if k in b)
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def _title(text: str, stopwords: frozenset[str]) -> str:
    best = summarize(text, 1, stopwords)
    title = best[0] if best else text
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def chapter_length(duration_sec: float) -> float:
    """Target chapter length scaled to the media: a fifth of it, between 1 and 5 minutes (a
    3-minute talk gets 3 chapters, an hour 12)."""
    return min(MAX_CHAPTER_SEC, max(MIN_CHAPTER_SEC, duration_sec / 5))


def chapters(
    segments: list[dict[str, Any]],
    target_sec: float | None = None,
    stopwords: frozenset[str] | None = None,
) -> list[dict[str, Any]]:
    """Chapters at the strongest vocabulary shifts (TextTiling), about one per `target_sec`
    (default: scaled to the length, see `chapter_length`)."""
    segs = [s for s in segments if str(s.get("text", "")).strip()]
    if not segs:
        return []
    start, end = float(segs[0]["start"]), float(segs[-1]["end"])
    if stopwords is None:
        stopwords = stopwords_for(" ".join(str(s["text"]) for s in segs))
    target = chapter_length(end - start) if target_sec is None else target_sec
    wanted = max(1, min(12, round((end - start) / target)))
    cuts: list[int] = []
    if wanted > 1 and len(segs) >= 4:
        bags = [Counter(tokenize(str(s["text"]), stopwords)) for s in segs]
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
                "title": _title(text, stopwords),
                "keywords": keywords(text, 4, stopwords),
            }
        )
    return out


def analyze(
    text: str,
    segments: list[dict[str, Any]] | None = None,
    *,
    max_sentences: int = 5,
    max_tags: int = 8,
    chapter_sec: float | None = None,
    language: str | None = None,
) -> dict[str, Any]:
    """{summary, tags, chapters, backend}: the whole local analysis (pure function). The
    stopwords are the language's (given or guessed from the text) plus the words common to
    most sentences, so any language gets content words."""
    stopwords = stopwords_for(text, language)
    summary = summarize(text, max_sentences, stopwords)
    return {
        "summary": " ".join(summary),
        "summary_sentences": summary,
        "tags": keywords(text, max_tags, stopwords),
        "chapters": chapters(segments or [], chapter_sec, stopwords),
        "text_language": language or guess_language(text),
        "backend": BACKEND,
    }


def analyze_in_child(
    reporter: Any, text: str, segments: list[dict[str, Any]], opts: dict[str, Any]
) -> dict[str, Any]:
    """Child-process entry point (CPU work stays off the node's event loop)."""
    reporter.progress(10, "ranking sentences")
    return analyze(text, segments, **opts)
