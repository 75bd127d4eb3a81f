"""REDIS_URL: one server, a Redis Cluster or Sentinel, read the same way everywhere."""

from __future__ import annotations

import pytest

from core import connections
from core.config import Settings, SettingsError
from core.connections import RedisUrlError, Target


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("redis://10.0.0.1:6379/2", Target("server", "redis://10.0.0.1:6379/2")),
        ("unix:///run/redis.sock", Target("server", "unix:///run/redis.sock")),
        (
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7001",
            Target(
                "cluster",
                "redis+cluster://10.0.0.1:7000,10.0.0.2:7001",
                (("10.0.0.1", 7000), ("10.0.0.2", 7001)),
            ),
        ),
        (
            "rediss+cluster://app:s%3Acret@node:7000/",
            Target(
                "cluster",
                "rediss+cluster://app:s%3Acret@node:7000/",
                (("node", 7000),),
                username="app",
                password="s:cret",
                ssl=True,
            ),
        ),
        (
            "redis+sentinel://:pw@s1:26379,s2/mymaster/3",
            Target(
                "sentinel",
                "redis+sentinel://:pw@s1:26379,s2/mymaster/3",
                (("s1", 26379), ("s2", 26379)),
                service="mymaster",
                db=3,
                password="pw",
            ),
        ),
    ],
)
def test_each_form_names_its_redis(url, target):
    assert connections.parse(url) == target


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://redis:6379", "must start with redis://"),
        ("redis+cluster://", "names no host"),
        ("redis+cluster://node:7000/3", "only database 0"),
        ("redis+cluster://node:port", "not host:port"),
        ("redis+cluster://node:7000?ssl_cert_reqs=none", "read only in redis:// URLs"),
        ("redis+sentinel://s1:26379", "names its service"),
        ("redis+sentinel://s1:26379/mymaster/x", "hosts/service[/db]"),
    ],
)
def test_a_url_that_names_no_redis_is_refused_saying_why(url, said):
    with pytest.raises(RedisUrlError, match=said.replace("[", r"\[").replace("]", r"\]")):
        connections.parse(url)


def test_a_password_may_hold_slashes_and_hosts_may_be_ipv6():
    target = connections.parse("redis+cluster://:Xy7/Se?cr#et+Key=@h1:7000,[::1],[fe80::2]:7001")
    assert target.password == "Xy7/Se?cr#et+Key="
    assert target.hosts == (("h1", 7000), ("::1", 6379), ("fe80::2", 7001))


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://:Xy7/Se?cret@h1:7000,h2:x",  # / and ? in the password, not encoded
        "redis+sentinel://:pa#s/s@s1:26379",
        "redis+cluster://:hunter2@h1:notaport",
        "redis+sentinel://:hunter2@s1:26379",
    ],
)
def test_no_error_about_a_url_quotes_its_password(url):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"REDIS_URL": url})
    (problem,) = refused.value.problems
    secret = url.partition("://:")[2].rpartition("@")[0]
    assert secret not in problem and "***" in problem, problem


def test_a_bad_redis_url_stops_the_process_with_the_forms_it_takes_and_no_password():
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"REDIS_URL": "redis+sentinel://:hunter2@s1:26379"})
    (problem,) = refused.value.problems
    assert "REDIS_URL" in problem and "redis+sentinel://sentinel1:26379/mymaster" in problem
    assert "hunter2" not in problem


@pytest.fixture
def sentinel_url():
    from signoff_demo import redis_server

    group = redis_server.start_sentinel(replicas=0, sentinels=1)
    try:
        yield group.url, group.master.port
    finally:
        group.stop()


async def burst_through_a_pause(url: str, port: int) -> list[str]:
    """200 writes at once while the server holds writes for a second (a fork, a slow disk)."""
    import asyncio

    import redis

    from core.store import redis_client

    client = redis_client(url)
    try:
        await client.ping()
        with redis.Redis(port=port) as server:
            server.execute_command("CLIENT", "PAUSE", 1000, "WRITE")
        done = await asyncio.gather(*(client.set(f"burst{n}", n) for n in range(200)), return_exceptions=True)
    finally:
        await client.aclose()
    return [type(d).__name__ for d in done if isinstance(d, Exception)]


async def test_a_burst_waits_for_a_connection_on_one_server_a_cluster_and_sentinel(
    redis_url, cluster_url, sentinel_url
):
    first_master = connections.sync_client(cluster_url)
    cluster_port = first_master.get_node_from_key("burst0").port
    first_master.close()

    assert await burst_through_a_pause(redis_url, int(redis_url.rsplit(":", 1)[1].split("/")[0])) == []
    assert await burst_through_a_pause(cluster_url, cluster_port) == []
    assert await burst_through_a_pause(*sentinel_url) == []


async def test_after_a_restart_an_idle_pooled_connection_is_replaced_before_the_next_command(tmp_path):
    """A Redis restarted while the pool held connections: each is checked (PING) once idle for
    2 s, and one the server closed is connected again, so the next click meets no error."""
    import asyncio

    from core.store import redis_client
    from signoff_demo import redis_server

    server = redis_server.start(data_dir=tmp_path)
    client = redis_client(server.url)
    try:
        await asyncio.gather(*(client.blpop("nothing", timeout=0.2) for _ in range(8)))  # 8 pooled
        server.stop()
        server = redis_server.start(port=server.port, data_dir=tmp_path)
        await asyncio.sleep(2.2)  # idle past the health-check interval, as after an outage
        done = await asyncio.gather(
            *(client.blpop("nothing", timeout=0.2) for _ in range(8)), return_exceptions=True
        )
    finally:
        await client.aclose()
        server.stop()

    assert [type(d).__name__ for d in done if isinstance(d, Exception)] == []
