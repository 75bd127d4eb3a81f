"""REDIS_URL: one server, a Redis Cluster or Sentinel, read the same way everywhere."""

from __future__ import annotations

import pytest

from agent_runner import connections
from agent_runner.config import Settings, SettingsError
from agent_runner.connections import RedisUrlError, Target


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
        ("redis+sentinel://s1:26379", "names its service"),
        ("redis+sentinel://s1:26379/mymaster/x", "hosts/service[/db]"),
    ],
)
def test_a_url_that_names_no_redis_is_refused_saying_why(url, said):
    with pytest.raises(RedisUrlError, match=said.replace("[", r"\[").replace("]", r"\]")):
        connections.parse(url)


def test_a_bad_redis_url_stops_the_process_with_the_forms_it_takes_and_no_password():
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"REDIS_URL": "redis+sentinel://:hunter2@s1:26379"})
    (problem,) = refused.value.problems
    assert "REDIS_URL" in problem and "redis+sentinel://sentinel1:26379/mymaster" in problem
    assert "hunter2" not in problem
