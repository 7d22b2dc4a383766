"""A GPU backend is declared only after a real self-test: an `nvidia-smi` that answers while no
usable CUDA device exists (a container with the tool, a stale driver) must not make the node
declare ffmpeg-nvenc or faster-whisper on the GPU, and an NVENC encoder that ffmpeg lists but
cannot encode one frame with is dropped."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fredica.capabilities import catalog, probes
from fredica.engine import declare

from .test_probes import ENCODERS, NVIDIA_SMI, enabled_everything, gpu_desktop, ok

F = catalog.CapabilityFunction
K = catalog.AcceleratorKind


def _gpu_backends(report: probes.ProbeReport) -> set[tuple[F, str, K]]:
    caps = declare.declared_capabilities(declare.declare(enabled_everything(), report))
    return {
        (c.function, c.backend, c.accelerator.kind)
        for c in caps
        if c.accelerator.kind is K.GPU or c.backend == "ffmpeg-nvenc"
    }


def test_an_nvidia_smi_without_a_usable_gpu_declares_no_gpu_backend(tmp_path: Path) -> None:
    # Given a real probe of this machine (no NVIDIA driver) with a fake nvidia-smi on PATH
    # that lists a GPU, and faster-whisper installed
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nprintf '{NVIDIA_SMI.strip()}\\n'\n")
    fake.chmod(0o755)
    path = f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = probes.ProbeEnv(
        which=lambda name: shutil.which(name, path=path),
        environ={**os.environ, "PATH": path},
    )
    report = probes.run_probes(env)
    # Then the GPU is not counted: the CUDA self-test found no device, and says so
    assert not report.has_gpu("cuda"), report.gpus
    notes = [n.detail for n in report.notes if n.probe == "nvidia-smi"]
    assert any("no usable CUDA device" in d for d in notes), notes
    assert not any(e.endswith("_nvenc") for e in report.ffmpeg_encoders)
    # And nothing is declared on the GPU: neither ffmpeg-nvenc nor faster-whisper
    assert _gpu_backends(report) == set()


def test_a_gpu_that_passes_the_cuda_self_test_is_declared() -> None:
    # the same listing with a passing self-test (a fake machine): the GPU backends come back
    report = gpu_desktop().report()
    assert report.has_gpu("cuda")
    backends = {(f, b) for f, b, _ in _gpu_backends(report)}
    assert {(F.FFMPEG, "ffmpeg-nvenc"), (F.TRANSCRIBE, "faster-whisper")} <= backends


@pytest.mark.parametrize(
    "cuda", ["CUDA_ERROR=cuInit failed with CUDA error 100\n", "CUDA_DEVICES=0\n"]
)
def test_a_failing_cuda_self_test_keeps_the_gpu_out(cuda: str) -> None:
    machine = gpu_desktop()
    machine.outputs["cuInit"] = ok(cuda)
    report = machine.report()
    assert not report.has_gpu("cuda") and _gpu_backends(report) == set()


def test_an_nvenc_that_cannot_encode_one_frame_is_not_declared() -> None:
    machine = gpu_desktop()
    machine.outputs["h264_nvenc -f null"] = probes.RunResult(1, "", "OpenEncodeSessionEx failed")
    report = machine.report()
    assert report.has_gpu("cuda") and "h264_nvenc" in ENCODERS
    assert "h264_nvenc" not in report.ffmpeg_encoders
    backends = {(f, b) for f, b, _ in _gpu_backends(report)}
    assert (F.FFMPEG, "ffmpeg-nvenc") not in backends
    assert (F.TRANSCRIBE, "faster-whisper") in backends
