"""A fault-injecting TCP proxy for cluster tests: it forwards one listening port on loopback to
a target port, and can drop, delay or cut the traffic on demand (the network between two real
`fredica serve` processes, without touching the machine's network).

- `cut()`: every open connection is closed at once, mid-body if need be, and new connections
  are closed as soon as they are accepted, until `heal()`.
- `delay(seconds)`: each chunk is held that long before it is forwarded.
- `duplicate_requests(True)`: the first chunk of each client connection is sent to the target
  twice, on two connections (a request the server then sees twice); the client gets the
  answer of the first.
- `record=True`: `traffic` keeps every byte forwarded, both ways (requests and answers), for
  tests that read what crossed the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator


class FaultProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1", record: bool = False) -> None:
        self.host = host
        self.target_port = target_port
        sock = socket.socket()
        sock.bind((host, 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self._cut = False
        self._delay = 0.0
        self._duplicate = False
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.AbstractServer | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self.connections = 0
        self._record = record
        self.traffic = bytearray()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # --- control (from the test's thread) -----------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._close_all()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def cut(self) -> None:
        self._cut = True
        self._loop.call_soon_threadsafe(self._close_all)

    def heal(self) -> None:
        self._cut = False

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def duplicate_requests(self, on: bool) -> None:
        self._duplicate = on

    @contextlib.contextmanager
    def cut_for(self) -> Iterator[None]:
        self.cut()
        try:
            yield
        finally:
            self.heal()

    # --- the proxy (its own thread and event loop) --------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, self.host, self.port)
        )
        self._started.set()
        self._loop.run_forever()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._cut:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        first = asyncio.Event()
        await asyncio.gather(
            self._pipe(reader, up_writer, first if self._duplicate else None),
            self._pipe(up_reader, writer, None),
            return_exceptions=True,
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            with contextlib.suppress(Exception):
                w.close()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        duplicate_first: asyncio.Event | None,
    ) -> None:
        try:
            while not self._cut:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if self._delay:
                    await asyncio.sleep(self._delay)
                if self._cut:
                    break
                if duplicate_first is not None and not duplicate_first.is_set():
                    duplicate_first.set()
                    await self._send_copy(chunk)
                if self._record:
                    self.traffic += chunk
                writer.write(chunk)
                await writer.drain()
        finally:
            if self._cut:
                writer.transport.abort()
            else:
                with contextlib.suppress(Exception):
                    writer.write_eof()

    async def _send_copy(self, chunk: bytes) -> None:
        """The same bytes once more on a connection of their own; its answer is discarded."""
        with contextlib.suppress(OSError):
            _, w = await asyncio.open_connection(self.host, self.target_port)
            w.write(chunk)
            await w.drain()
            await asyncio.sleep(0.05)
            w.transport.abort()
