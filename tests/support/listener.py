"""A plain TCP listener on loopback that records every byte it is sent: where a credential would
arrive if Tidemark sent it to a host the deployment does not allow."""

import socket
import threading


class Listener:
    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.received = bytearray()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn) -> None:
        conn.settimeout(2)
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                with self._lock:
                    self.received.extend(chunk)
                if b"\r\n\r\n" in chunk:
                    return  # one HTTP request's headers: enough to see a credential; hang up

    def saw(self, secret: str) -> bool:
        with self._lock:
            return secret.encode() in self.received

    def close(self) -> None:
        self._closed = True
        self.sock.close()
