"""Each moto server is a fork of one zygote that imported moto once (``servers.start_moto``), and
still a server of its own: its own session, state and ids, ended by its own stop.

A local stack starts two moto servers, and the suite starts dozens of stacks: a fresh interpreter
importing moto cost each about 0.8 CPU-s, a fork about 0.03 (and 0.15 with its first requests)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest

from sluice_dev.local import servers
from sluice_dev.local.forkserver import ForkedProcess

pytestmark = pytest.mark.timeout(60)


def sqs(server: servers.Server) -> Any:
    return boto3.client("sqs", endpoint_url=server.extra["url"], region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_moto_servers_are_forks_of_one_zygote_each_with_its_own_session_state_and_ids(tmp_path: Path) -> None:
    a = servers.start_moto(log_path=tmp_path / "a.log")
    b = servers.start_moto(log_path=tmp_path / "b.log")
    try:
        assert isinstance(a.proc, ForkedProcess) and isinstance(b.proc, ForkedProcess)
        zygote = psutil.Process(a.pid).ppid()
        assert zygote == psutil.Process(b.pid).ppid() != os.getpid()
        assert psutil.Process(zygote).ppid() == os.getpid()
        for server in (a, b):
            assert os.getsid(server.pid) == server.pid  # stop() ends its process group
            # ps shows the server it is (tests/stack/test_dev.py finds it so)
            assert psutil.Process(server.pid).cmdline()[1:3] == ["-m", "sluice_dev.local.motoserver"]
        ids = []
        for server in (a, b):
            url = sqs(server).create_queue(QueueName="q")["QueueUrl"]
            ids.append(sqs(server).send_message(QueueUrl=url, MessageBody="x")["MessageId"])
        # moto's generator reseeded in each fork: the zygote's state would give both the same ids
        assert ids[0] != ids[1]
        url = sqs(a).get_queue_url(QueueName="q")["QueueUrl"]
        sqs(a).delete_queue(QueueUrl=url)
        assert sqs(a).list_queues().get("QueueUrls", []) == []
        assert len(sqs(b).list_queues()["QueueUrls"]) == 1  # b's state is its own
    finally:
        a.stop()
        b.stop()
    assert a.proc.returncode == b.proc.returncode == 0 and not a.alive() and not b.alive()
    assert psutil.pid_exists(zygote)  # the zygote stays for the next server of this process
    c = servers.start_moto()
    try:
        assert psutil.Process(c.pid).ppid() == zygote
        assert sqs(c).list_queues().get("QueueUrls", []) == []  # a fresh server, not a's or b's
    finally:
        c.kill()
    assert c.proc.returncode == -9


def test_when_the_zygote_dies_its_servers_end_and_the_next_server_comes_from_a_new_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own zygote (one per environment): the one it kills must not be the zygote of the servers
    # other tests of this process use (the session's moto_server), which would end with it.
    bystander = servers.start_moto()
    monkeypatch.setenv("SLUICE_TEST_OWN_ZYGOTE", "test_moto_fork")
    a = servers.start_moto()
    zygote = psutil.Process(a.pid).ppid()
    assert zygote != os.getpid(), "a server of this process's own, not a fork"
    assert zygote != psutil.Process(bystander.pid).ppid()
    os.kill(zygote, signal.SIGKILL)
    assert a.proc.wait(10) == -signal.SIGKILL  # reported, and killed: nobody would reap it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and gone(a.pid) is False:
        time.sleep(0.05)
    assert gone(a.pid)
    b = servers.start_moto()
    try:
        assert psutil.Process(b.pid).ppid() not in (zygote, os.getpid())
        assert sqs(b).list_queues().get("QueueUrls", []) == []
    finally:
        b.stop()
    assert b.proc.returncode == 0
    try:
        assert bystander.alive() and sqs(bystander).list_queues().get("QueueUrls", []) == []
    finally:
        bystander.stop()
