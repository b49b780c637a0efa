"""Running the HTTP app with uvicorn: :func:`serve` in the foreground (``build MODEL --serve``) and
:class:`BackgroundServer` on a thread of its own (tests, benchmarks), bound to a loopback address by default."""
from __future__ import annotations

import socket
import threading
import time
from typing import Any

__all__ = ["serve", "BackgroundServer"]


def serve(app: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Serve ``app`` on ``host:port`` until interrupted (Ctrl-C). Raises OSError when the address cannot be bound."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="on")


class BackgroundServer:
    """``with BackgroundServer(app) as server: ... server.url ...``: uvicorn serving ``app`` on ``host:port``
    (``port=0``: a free port, chosen by the system) on a daemon thread; leaving the block stops it (and the
    app's engine). Raises RuntimeError when the server does not start within ``start_timeout`` seconds."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0):
        self.app, self.host, self.port, self.start_timeout = app, host, port, start_timeout
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> "BackgroundServer":
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name="model-builder-server")
        self._thread.start()
        end = time.monotonic() + self.start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > end:
                self.__exit__(None, None, None)
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._server = self._thread = None
