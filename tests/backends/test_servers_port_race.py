"""The local stack's redis-server on a port another process took between free_port() and its bind."""

import socket
from pathlib import Path

import pytest

from sluice_dev.local import servers


@pytest.mark.timeout(60)
def test_a_redis_whose_free_port_was_taken_meanwhile_starts_on_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket()  # bound, not listening: the port is in use, and nothing answers on it
    taken.bind(("127.0.0.1", 0))
    busy = taken.getsockname()[1]
    ports = iter([busy])
    real = servers.free_port
    monkeypatch.setattr(servers, "free_port", lambda: next(ports, None) or real())
    server = servers.start_redis(workdir=tmp_path / "redis", log_path=tmp_path / "redis.log")
    try:
        assert server.port != busy
        assert "Address already in use" in (tmp_path / "redis.log").read_text()
    finally:
        server.stop()
        taken.close()
    with socket.socket() as s2:  # a port the caller names is not changed: its failure is the caller's
        s2.bind(("127.0.0.1", 0))
        with pytest.raises(RuntimeError, match="before listening"):
            servers.start_redis(port=s2.getsockname()[1], workdir=tmp_path / "redis2")
