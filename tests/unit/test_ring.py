"""The conductors' hash ring: balance, minimal movement, the backend URL, one conductor."""

from __future__ import annotations

import collections

from acceld.conductor import ring
from tests import helpers

HOSTS = [f"compute-{i:05d}" for i in range(10_000)]


def shares(members: tuple[str, ...]) -> dict[str, float]:
    hash_ring = ring.make_ring(members)
    counts = collections.Counter(ring.owner_on(hash_ring, h) for h in HOSTS)
    return {m: counts[m] / len(HOSTS) for m in members}


def test_two_conductors_split_the_hosts_near_half_each():
    for members in (("cond-a", "cond-b"), ("ctl-1.example.org", "ctl-2.example.org")):
        assert all(0.45 <= share <= 0.55 for share in shares(members).values()), members


def test_three_conductors_split_the_hosts_near_a_third_each():
    assert all(0.28 <= share <= 0.39 for share in shares(("c1", "c2", "c3")).values())


def test_a_conductor_leaving_moves_only_its_own_hosts():
    before = ring.make_ring(("c1", "c2", "c3"))
    after = ring.make_ring(("c1", "c3"))
    moved = [h for h in HOSTS if ring.owner_on(before, h) != ring.owner_on(after, h)]
    assert moved
    assert {ring.owner_on(before, h) for h in moved} == {"c2"}


def test_backend_url_carries_the_membership_timeout_unless_set():
    conf = helpers.make_conf(coordination={"backend_url": "redis://127.0.0.1:6379",
                                           "membership_timeout": 7})
    assert ring.backend_url(conf.coordination) == \
        "redis://127.0.0.1:6379?membership_timeout=7"
    conf.set_override("backend_url", "redis://r:6379/?namespace=x", group="coordination")
    assert ring.backend_url(conf.coordination) == \
        "redis://r:6379/?namespace=x&membership_timeout=7"
    conf.set_override("backend_url", "redis://r:6379?timeout=3", group="coordination")
    assert ring.backend_url(conf.coordination) == "redis://r:6379?timeout=3"


def test_without_a_backend_one_conductor_owns_every_host():
    conf = helpers.make_conf()
    lone = ring.HostRing(conf, "only")
    lone.start()
    assert not lone.shared
    assert lone.members() == ("only",)
    assert all(lone.owns(h) and lone.owner(h) == "only" for h in HOSTS[:100])
    lone.stop()
