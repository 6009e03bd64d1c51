"""A loopback TCP proxy in front of Redis that can lose a reply on purpose.

``Proxy.cut_after_next(predicate)``: the next client-to-server chunk that matches is forwarded to
Redis; Redis runs the command and answers; the proxy reads that whole answer (kept, decoded, in
``dropped``), does NOT pass it on, and closes both sides of that connection. To the client this is
a reply lost to a broken connection, after the command took effect: exactly the case a client
that retries (redis-py with ``retry=...``) re-sends.

``Proxy.before_next(predicate, hook)``: runs ``hook()`` just before the next matching chunk is
forwarded. ``cut_after_next(predicate, before_resend=hook)`` arms such a hook for the chunk after
the cut one: it runs between the first delivery and the re-send (to look at what the first
delivery did, or to let another client move a job before the re-send arrives).

``Proxy.refuse()``: an outage as a client sees it: every connection is cut and new ones are
refused (the port is closed) until ``Proxy.admit()`` opens it again.

Every forwarded chunk is recorded (``sent``), so a test can prove a command really reached the
server twice. Threads and sockets only; ``close()`` joins every thread and closes every socket.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import hiredis

HOST = "127.0.0.1"
CHUNK = 1 << 16
Predicate = Callable[[bytes], bool]


def has(needle: bytes) -> Predicate:
    """A predicate: the chunk contains ``needle`` (e.g. ``b"EVALSHA"``)."""
    return lambda chunk: needle in chunk


class _Link:
    """One client connection and its upstream connection, pumped by two threads."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.drop_reply = threading.Event()
        self._open_pumps = 2
        self._lock = threading.Lock()

    def shutdown(self) -> None:
        """Wake both pumps (their recv returns); the sockets close when both have stopped."""
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def pump_done(self) -> None:
        self.shutdown()
        with self._lock:
            self._open_pumps -= 1
            last = self._open_pumps == 0
        if last:
            self.client.close()
            self.upstream.close()


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream``; see the module docstring."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.sent: list[bytes] = []
        self.dropped: list[Any] = []
        self.errors: list[BaseException] = []
        self._cut: Predicate | None = None
        self._hook: tuple[Predicate, Callable[[], None]] | None = None
        self._then: tuple[Predicate, Callable[[], None]] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._refusing = False
        self._links: list[_Link] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]

    # control -----------------------------------------------------------------------------------

    def start(self) -> Proxy:
        self._spawn(self._accept_loop)
        return self

    def cut_after_next(
        self, predicate: Predicate, before_resend: Callable[[], None] | None = None
    ) -> None:
        """Forward the next matching chunk, swallow the whole reply, then cut the connection.

        ``before_resend``, if given, runs just before the matching chunk after that one (the
        client's re-send) is forwarded: the first delivery has then run, the second not yet.
        """
        with self._lock:
            self._cut = predicate
            self._then = None if before_resend is None else (predicate, before_resend)

    def before_next(self, predicate: Predicate, hook: Callable[[], None]) -> None:
        """Run ``hook()`` just before the next matching chunk is forwarded."""
        with self._lock:
            self._hook = (predicate, hook)

    def refuse(self) -> None:
        """Cut every connection and refuse new ones until ``admit``."""
        with self._lock:
            self._refusing = True
            links = list(self._links)
            self._links.clear()
        self._listener.close()
        for link in links:
            link.shutdown()

    def admit(self) -> None:
        """Take connections again, on the same port."""
        listener = socket.create_server((HOST, self.port))
        listener.settimeout(0.05)
        with self._lock:
            self._listener = listener
            self._refusing = False

    def reset(self) -> None:
        """Forget what was recorded so far."""
        with self._lock:
            self.sent.clear()
            self.dropped.clear()

    def forwarded(self, needle: bytes) -> list[bytes]:
        """The chunks forwarded to the server that contain ``needle``."""
        with self._lock:
            return [chunk for chunk in self.sent if needle in chunk]

    @property
    def armed(self) -> bool:
        with self._lock:
            return self._cut is not None or self._hook is not None

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            threads = list(self._threads)
        if threads:
            threads[0].join(timeout=10)  # the accept loop: no new links from here on
        with self._lock:
            links, threads = list(self._links), list(self._threads)
        for link in links:
            link.shutdown()
        for thread in threads:
            thread.join(timeout=10)
        self._listener.close()
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"proxy threads did not stop: {alive}")

    def __enter__(self) -> Proxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # machinery ---------------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=self._guarded, args=(target, *args), daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _guarded(self, target: Callable[..., None], *args: Any) -> None:
        try:
            target(*args)
        except Exception as exc:
            with self._lock:
                self.errors.append(exc)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            listener = self._listener
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._refusing or listener is not self._listener:  # closed by refuse()
                    time.sleep(0.01)
                    continue
                raise
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                raise
            upstream.settimeout(None)
            self._link(client, upstream)

    def _link(self, client: socket.socket, upstream: socket.socket) -> None:
        link = _Link(client, upstream)
        with self._lock:
            if self._refusing:  # accepted just as the outage began
                client.close()
                upstream.close()
                return
            self._links.append(link)
        self._spawn(self._to_server, link)
        self._spawn(self._to_client, link)

    def _take(self, chunk: bytes) -> tuple[bool, Callable[[], None] | None]:
        """Whether this chunk arms a cut, and the hook to run before it; both are one-shot."""
        with self._lock:
            hook = None
            if self._hook is not None and self._hook[0](chunk):
                hook, self._hook = self._hook[1], None
            cut = self._cut is not None and self._cut(chunk)
            if cut:
                self._cut, self._hook, self._then = None, self._then, None
            return cut, hook

    def _to_server(self, link: _Link) -> None:
        try:
            while chunk := link.client.recv(CHUNK):
                cut, hook = self._take(chunk)
                if hook is not None:
                    hook()
                if cut:
                    link.drop_reply.set()
                with self._lock:
                    self.sent.append(chunk)
                link.upstream.sendall(chunk)
        except OSError:
            pass
        finally:
            link.pump_done()

    def _to_client(self, link: _Link) -> None:
        reader: Any = None
        try:
            while chunk := link.upstream.recv(CHUNK):
                if not link.drop_reply.is_set():
                    link.client.sendall(chunk)
                    continue
                reader = reader or hiredis.Reader()
                reader.feed(chunk)
                reply = reader.gets()
                if reply is not False:  # the whole reply is in: lose it and cut
                    with self._lock:
                        self.dropped.append(reply)
                    return
        except OSError:
            pass
        finally:
            link.pump_done()
