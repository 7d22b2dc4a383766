"""The CLI without traps: ID prefixes, `--node host:port`, a busy port, Ctrl-C in `process`,
one-line errors and `--version`, against real node processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from fredica import __version__
from fredica.cli.demo import free_port
from tests.media_support import SENTENCES, make_media, serve_files

from .conftest import ServedNode

pytestmark = pytest.mark.slow


def fredica(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ) | {"COLUMNS": "200"}
    env.pop("FREDICA_NODE", None)
    return subprocess.run(
        [sys.executable, "-m", "fredica", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def sleepers(path: Path, n: int, seconds: float = 30) -> Path:
    tasks = [
        {"ref": f"t{i}", "type": "TEST_SLEEP", "payload": {"seconds": seconds}} for i in range(n)
    ]
    path.write_text(json.dumps({"tasks": tasks}))
    return path


def test_any_unique_id_prefix_works_and_an_ambiguous_one_lists_matches(
    served: ServedNode, tmp_path: Path
) -> None:
    served.start()
    # 20 tasks: at least two share their first hex digit (pigeonhole), so that digit is ambiguous
    out = served.cli("pipeline", "create", "custom", "--tasks", str(sleepers(tmp_path / "t", 20)))
    pipeline_id = out.stdout.split()[1]
    shown = served.cli("pipeline", "show", pipeline_id[:6]).stdout
    assert pipeline_id in shown
    data = json.loads(served.cli("pipeline", "show", pipeline_id[:8], "--json").stdout)
    ids = [t["id"] for t in data["tasks"]]
    first = ids[0]
    task = json.loads(served.cli("task", "show", first[:8]).stdout)
    assert task["id"] == first
    cancelled = served.cli("task", "cancel", first[:8]).stdout
    assert cancelled.startswith(f"task {first}: ")  # the full ID the prefix resolved to

    digit, count = Counter(i[0] for i in ids).most_common(1)[0]
    assert count >= 2
    ambiguous = served.cli("task", "show", digit, check=False)
    assert ambiguous.returncode == 1
    assert f"'{digit}' matches" in ambiguous.stderr
    for task_id in (i for i in ids if i.startswith(digit)):
        assert task_id in ambiguous.stderr
    missing = served.cli("task", "pause", "zzzz", check=False)
    assert missing.returncode == 1 and "no task with an ID starting with 'zzzz'" in missing.stderr

    listing = served.cli("pipeline", "list").stdout
    assert pipeline_id in listing  # the full ID, not cut off
    served.cli("pipeline", "cancel", pipeline_id[:8])
    after = json.loads(served.cli("pipeline", "show", pipeline_id, "--json").stdout)
    assert after["status"] in ("cancelling", "cancelled")


def _cursor_of(stdout: str) -> str | None:
    hints = [line for line in stdout.splitlines() if line.startswith("next page: ")]
    return hints[-1].split("--cursor ")[1].strip() if hints else None


def test_task_and_pipeline_lists_page_with_the_cursor(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    pipelines = [
        served.cli("pipeline", "create", "custom", "--material-id", f"m{i}", "--tasks",
                   str(sleepers(tmp_path / f"t{i}", 4))).stdout.split()[1]
        for i in range(3)
    ]  # fmt: skip
    with served.client() as client:
        expected = [t["id"] for t in client.get("/api/v1/tasks").json()["tasks"]]
    assert len(expected) == 12

    seen: list[str] = []
    args = ["task", "list", "--limit", "5"]
    for _ in range(10):
        out = served.cli(*args).stdout
        seen += [i for i in expected if i in out]
        cursor = _cursor_of(out)
        if cursor is None:
            break
        assert "fredica task list --cursor" in out
        args = ["task", "list", "--limit", "5", "--cursor", cursor]
    assert sorted(seen) == sorted(expected) and len(seen) == 12
    every = served.cli("task", "list", "--limit", "5", "--all").stdout
    assert all(i in every for i in expected) and _cursor_of(every) is None
    one = served.cli("task", "list", "--pipeline", pipelines[0][:8], "--status", "pending,running")
    assert sum(i in one.stdout for i in expected) == 4

    first = served.cli("pipeline", "list", "--limit", "2").stdout
    assert [p for p in pipelines if p in first] == pipelines[1:]
    rest = served.cli("pipeline", "list", "--limit", "2", "--cursor", _cursor_of(first) or "")
    assert pipelines[0] in rest.stdout and _cursor_of(rest.stdout) is None

    bad = served.cli("task", "list", "--cursor", "nonsense", check=False)
    assert bad.returncode == 1 and "422" in bad.stderr and "cursor" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_node_without_a_scheme_and_bad_node_values(served: ServedNode) -> None:
    served.start()
    plain = fredica("status", "--node", f"127.0.0.1:{served.port}")
    assert plain.returncode == 0, plain.stderr
    assert "running" in plain.stdout
    for bad in ("http://[::1", "ftp://127.0.0.1:1", "   "):
        result = fredica("status", "--node", bad)
        assert result.returncode != 0
        assert "Traceback" not in result.stderr + result.stdout
        assert result.stderr.startswith("error:") and "--node" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    down = fredica("status", "--node", f"127.0.0.1:{free_port()}")
    assert down.returncode == 2 and "cannot reach a node" in down.stderr
    via_env = subprocess.run(
        [sys.executable, "-m", "fredica", "capabilities"],
        capture_output=True,
        text=True,
        env=dict(os.environ) | {"FREDICA_NODE": f"127.0.0.1:{served.port}", "COLUMNS": "200"},
        timeout=60,
    )
    assert via_env.returncode == 0, via_env.stderr
    assert "TEST_SLEEP" in via_env.stdout or "function" in via_env.stdout
    assert f"127.0.0.1:{served.port}" in via_env.stdout


def test_serve_on_a_busy_port_names_it_before_creating_anything(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        data = tmp_path / "fresh-data"
        result = fredica("serve", "--data-dir", str(data), "--port", str(port), timeout=30)
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr
    assert not data.exists()


def test_version_and_user_errors_are_one_line(tmp_path: Path) -> None:
    version = fredica("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"fredica {__version__}"
    directory = fredica("process", str(tmp_path), "--node", "127.0.0.1:9")
    assert directory.returncode == 2 and "is a directory" in directory.stdout
    missing = fredica("process", str(tmp_path / "nope.mp4"), "--node", "127.0.0.1:9")
    assert missing.returncode == 2 and "no such file" in missing.stdout
    for result in (directory, missing):
        assert "Traceback" not in result.stdout + result.stderr


def _interrupt_process(args: list[str], cwd: Path) -> tuple[str, float, int]:
    """Start `fredica process`, Ctrl-C it once its pipeline exists; (output, seconds, code)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fredica", "process", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env=dict(os.environ) | {"COLUMNS": "200"},
        # a test run started in the background inherits an ignored SIGINT; a user's shell
        # delivers Ctrl-C, so the command under test gets the default handling back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("pipeline "):
            break
    else:
        raise AssertionError("".join(lines))
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
        raise AssertionError(f"no exit 60 s after Ctrl-C:\n{''.join(lines)}{rest}") from None
    return "".join(lines) + rest, time.monotonic() - sent, proc.returncode


# long enough that the pipeline is surely still running when Ctrl-C comes
LONG_TALK = SENTENCES * 8


def test_ctrl_c_in_process_on_an_own_node_cancels_and_returns_at_once(tmp_path: Path) -> None:
    _, video = make_media(tmp_path, LONG_TALK)
    data = tmp_path / "data"
    out, seconds, code = _interrupt_process(
        [str(video), "--template", "transcribe_long", "--data-dir", str(data), "--chunk", "3"],
        tmp_path,
    )
    assert code == 130, out
    assert "was cancelled" in out and "Traceback" not in out
    assert seconds < 10, f"took {seconds:.1f} s to return after Ctrl-C"


def test_ctrl_c_in_process_with_node_leaves_the_pipeline_running(
    served: ServedNode, tmp_path: Path
) -> None:
    served.start()
    _, video = make_media(tmp_path, LONG_TALK)
    out, seconds, code = _interrupt_process(
        [str(video), "--template", "transcribe_long", "--node", f"127.0.0.1:{served.port}"],
        tmp_path,
    )
    assert code == 130, out
    assert "keeps running" in out and "fredica pipeline cancel" in out
    assert seconds < 5
    pipeline_id = next(
        ln.split()[1].rstrip(":") for ln in out.splitlines() if ln.startswith("pipeline ")
    )
    status = json.loads(served.cli("pipeline", "show", pipeline_id, "--json").stdout)["status"]
    assert status not in ("cancelled", "cancelling")


def test_network_test_reports_http_errors_as_errors(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    (tmp_path / "here.txt").write_text("hello")
    with serve_files(tmp_path) as files:
        result = served.cli(
            "network-test", f"{files.url}/here.txt", f"{files.url}/status/503", check=False
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error (HTTP 503)" in result.stdout and "ok (HTTP 200)" in result.stdout
    assert "1 URL(s) failed" in result.stderr
    assert result.stdout.endswith("\n")


def test_failure_summaries_name_upstream_tasks_by_ref(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    tasks = tmp_path / "fail.json"
    tasks.write_text(
        json.dumps(
            [
                {"ref": "boom", "type": "TEST_FAIL", "payload": {"error_type": "PERMANENT"}},
                {"ref": "after", "type": "TEST_SLEEP", "depends_on": ["boom"]},
            ]
        )
    )
    result = served.cli("pipeline", "create", "custom", "--tasks", str(tasks), "-f", check=False)
    assert result.returncode == 1
    assert "upstream task boom failed" in result.stdout, result.stdout


def _print_pipeline(served: ServedNode, path: Path, payload: dict[str, object]) -> tuple[str, str]:
    """Create a pipeline of one TEST_PRINT task; returns (pipeline id, task id)."""
    path.write_text(json.dumps([{"ref": "p", "type": "TEST_PRINT", "payload": payload}]))
    out = served.cli("pipeline", "create", "custom", "--tasks", str(path)).stdout
    pipeline_id = out.split()[1]
    data = json.loads(served.cli("pipeline", "show", pipeline_id, "--json").stdout)
    return pipeline_id, data["tasks"][0]["id"]


def _wait_status(served: ServedNode, pipeline_id: str, wanted: str) -> None:
    with served.client() as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if client.get(f"/api/v1/pipelines/{pipeline_id}").json()["status"] == wanted:
                return
            time.sleep(0.1)  # polling the node's state, with a deadline
    raise AssertionError(f"pipeline {pipeline_id} never became {wanted}")


def test_pipeline_retry_delete_and_task_log(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    pipeline_id, task_id = _print_pipeline(served, tmp_path / "p.json", {"succeed_on": 2})
    _wait_status(served, pipeline_id, "failed")
    retried = served.cli("pipeline", "retry", pipeline_id[:8]).stdout
    assert f"pipeline {pipeline_id}: " in retried and "1 task(s) queued again" in retried
    _wait_status(served, pipeline_id, "completed")
    nothing = served.cli("pipeline", "retry", pipeline_id[:8], check=False)
    assert nothing.returncode == 1 and "409: " in nothing.stderr
    assert "no failed or cancelled tasks" in nothing.stderr

    log = served.cli("task", "log", task_id[:8]).stdout
    assert "program err 0" in log and "child out 1" in log and "attempt 2 printed" in log
    first = served.cli("task", "log", task_id[:8], "--attempt", "1").stdout
    assert "attempt 1 printed" in first and "attempt 2 printed" not in first
    missing = served.cli("task", "log", task_id[:8], "--attempt", "5", check=False)
    assert missing.returncode == 1
    assert f"task {task_id} has no log of attempt 5 (logged: 1, 2)" in missing.stderr

    # deleting asks first; without a terminal to ask on it refuses and deletes nothing
    unasked = subprocess.run(
        [sys.executable, "-m", "fredica", "pipeline", "delete", pipeline_id[:8],
         "--node", served.url],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, env=served.env(), timeout=60,
    )  # fmt: skip
    assert unasked.returncode == 1 and "pass --yes" in unasked.stderr
    assert "Traceback" not in unasked.stderr
    deleted = served.cli("pipeline", "delete", pipeline_id[:8], "--yes").stdout
    assert deleted.strip() == f"pipeline {pipeline_id} deleted (1 tasks)"
    gone = served.cli("pipeline", "show", pipeline_id, check=False)
    assert gone.returncode == 1 and "404" in gone.stderr
    assert not (served.data_dir / "logs" / "tasks" / task_id).exists()
    assert not (served.data_dir / "results" / task_id).exists()


def test_task_log_follow_prints_a_running_task_until_it_ends(
    served: ServedNode, tmp_path: Path
) -> None:
    served.start()
    release = tmp_path / "release"
    pipeline_id, task_id = _print_pipeline(
        served, tmp_path / "p.json", {"hold": 30, "release": str(release)}
    )
    busy = served.cli("pipeline", "delete", pipeline_id, "--yes", check=False)
    assert busy.returncode == 1 and "has 1 active task" in busy.stderr
    with subprocess.Popen(
        [sys.executable, "-m", "fredica", "task", "log", task_id[:8], "-f", "--node", served.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=served.env(),
    ) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        seen: list[str] = []
        for line in proc.stdout:  # the log arrives while the task runs
            seen.append(line)
            if line.startswith("tick 2"):
                break
        else:
            raise AssertionError("".join(seen) + proc.stderr.read())
        with served.client() as client:
            assert client.get(f"/api/v1/tasks/{task_id}").json()["status"] == "running"
        release.touch()
        watchdog = threading.Timer(30, proc.kill)  # the command must end with its task
        watchdog.start()
        try:
            rest = proc.stdout.read()  # the same buffered reader: nothing read ahead is lost
            code = proc.wait()
        finally:
            watchdog.cancel()
        assert code == 0, proc.stderr.read()
    text = "".join(seen) + rest
    assert "attempt 1 printed" in text
    assert "exit code 0" in text.splitlines()[-1]  # printed to the end of the attempt
