"""`signoff redis` and the local server: modules checked, nothing foreign touched."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from signoff_demo import redis_server
from tests.support.paths import SIGNOFF


def test_started_server_has_json_and_search_and_stops(tmp_path):
    server = redis_server.start(data_dir=tmp_path, appendonly=True)
    try:
        client = redis.Redis.from_url(server.url)
        assert redis_server.missing_modules(client) == []
        client.json().set("doc", "$", {"ok": True})
        assert client.json().get("doc") == {"ok": True}
        client.close()
        assert (tmp_path / "appendonlydir").is_dir()
    finally:
        server.stop()
    assert server.process.poll() is not None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=0.5).ping()


def test_a_server_without_the_modules_is_refused_plainly(tmp_path):
    port = redis_server.free_port()
    bare = subprocess.Popen(
        [str(redis_server.server_binary()), "--port", str(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        with pytest.raises(redis_server.RedisSetupError) as refused:
            redis_server.check_server(f"redis://127.0.0.1:{port}/0")
    finally:
        bare.terminate()
        bare.wait(10)
    assert "lacks the module(s) ReJSON, search" in str(refused.value)
    assert "Redis 8" in str(refused.value)


def test_unreachable_redis_url_is_a_clear_error():
    result = subprocess.run(
        [*SIGNOFF, "redis"],
        env={**os.environ, "REDIS_URL": f"redis://127.0.0.1:{redis_server.free_port()}/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "signoff: cannot reach Redis at redis://127.0.0.1:" in result.stderr


def test_signoff_redis_with_redis_url_starts_nothing(redis_url):
    result = subprocess.run(
        [*SIGNOFF, "redis"],
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert f"REDIS_URL is set: using {redis_url}" in result.stdout


def test_signoff_redis_runs_in_the_foreground_until_interrupted(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    process = subprocess.Popen(
        [*SIGNOFF, "redis", "--data-dir", str(tmp_path), "--appendonly", "no"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = process.stdout.readline().strip()
        assert first.startswith("REDIS_URL=redis://127.0.0.1:")
        url = first.removeprefix("REDIS_URL=")
        assert redis.Redis.from_url(url).ping()
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    assert not (tmp_path / "appendonlydir").exists()


def _signoff_redis(*args: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    process = subprocess.Popen(
        [*SIGNOFF, "redis", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = process.stdout.readline().strip() if process.stdout else ""
    return process, first


def test_signoff_redis_cluster_starts_three_masters_keeps_their_data_and_stops(tmp_path: Path):
    from core import connections

    process, first = _signoff_redis("--cluster", "3", "--data-dir", str(tmp_path), "--appendonly", "yes")
    try:
        assert first.startswith("REDIS_URL=redis+cluster://127.0.0.1:"), first
        url = first.removeprefix("REDIS_URL=")
        client = connections.sync_client(url)
        assert len(client.get_primaries()) == 3
        assert client.cluster_info()["cluster_state"] == "ok"
        for n in range(30):  # keys on every master
            client.set(f"k{n}", n)
        client.close()
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(f"redis://{url.removeprefix('redis+cluster://').split(',')[0]}/0").ping()

    # The same data directory starts the same cluster again, with what it held.
    again, first_again = _signoff_redis("--cluster", "3", "--data-dir", str(tmp_path), "--appendonly", "yes")
    try:
        assert first_again.removeprefix("REDIS_URL=") == url
        client = connections.sync_client(url)
        assert [client.get(f"k{n}") for n in range(30)] == [str(n) for n in range(30)]
        client.close()
    finally:
        again.send_signal(signal.SIGINT)
        assert again.wait(30) == 0


def test_a_plain_url_at_one_node_of_a_cluster_says_to_name_the_cluster(cluster_url):
    node = cluster_url.removeprefix("redis+cluster://").split(",")[0]
    result = subprocess.run(
        [*SIGNOFF, "pending"],
        env={**os.environ, "REDIS_URL": f"redis://{node}/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "names one node of a Redis Cluster: name the cluster, redis+cluster://" in result.stderr
