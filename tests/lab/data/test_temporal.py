"""Timed edge streams: the Debian changelog parser on files made here, the synthetic drift."""

from __future__ import annotations

import gzip

import pytest
import torch

from posenc.lab.data.temporal import (
    TemporalEvents,
    chronological_split,
    debian_changelog_events,
    drifting_communities,
    period_communities,
)

ENTRY = """{source} ({version}) unstable; urgency=medium

  * A change.

 -- {name} <{email}>  {date}

"""


def _write(root, package, entries):
    folder = root / package
    folder.mkdir()
    text = "".join(ENTRY.format(**e) for e in entries)
    (folder / "changelog.Debian.gz").write_bytes(gzip.compress(text.encode()))


def test_changelog_events_in_time_order_deduplicated(tmp_path):
    a = {
        "source": "foo",
        "version": "1.0-1",
        "name": "Ann",
        "email": "Ann@x.org",
        "date": "Mon, 02 Jan 2023 13:06:21 +0100",
    }
    b = {
        "source": "foo",
        "version": "0.9-1",
        "name": "Bob",
        "email": "bob@y.org",
        "date": "Sat, 31 Dec 2022 16:40:30 +0100",
    }
    c = {
        "source": "bar",
        "version": "2",
        "name": "Ann",
        "email": "ann@x.org",
        "date": "Sun, 01 Jan 2023 00:00:00 +0000",
    }
    _write(tmp_path, "foo", [a, b])
    _write(tmp_path, "libfoo1", [a, b])  # a binary package of the same source: same entries
    _write(tmp_path, "bar", [c])
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "changelog.Debian.gz").write_bytes(b"not gzip")
    events = debian_changelog_events(tmp_path)
    assert len(events) == 3
    names = [
        (events.names[int(s)], events.names[int(d)])
        for s, d in zip(events.src, events.dst, strict=True)
    ]
    assert names == [
        ("person:bob@y.org", "package:foo"),
        ("person:ann@x.org", "package:bar"),
        ("person:ann@x.org", "package:foo"),
    ]
    assert events.time.tolist() == [1672501230.0, 1672531200.0, 1672661181.0]


def test_changelog_events_refuse_an_empty_root(tmp_path):
    with pytest.raises(ValueError, match="root"):
        debian_changelog_events(tmp_path)


def test_drifting_communities_edges_stay_inside_a_group_between_drifts():
    events = drifting_communities(
        num_nodes=40, communities=4, steps=20, events_per_step=5, period=10, drift=0.0
    )
    groups = torch.arange(40) % 4
    assert bool((groups[events.src] == groups[events.dst]).all())
    assert bool((events.src != events.dst).all()) and len(events) == 100
    moved = drifting_communities(
        num_nodes=40, communities=4, steps=20, events_per_step=5, period=10, drift=1.0
    )
    late = moved.time >= 10
    before = groups[moved.src[~late]] == groups[moved.dst[~late]]
    after = groups[moved.src[late]] == groups[moved.dst[late]]
    assert bool(before.all()) and not bool(after.all())  # every node changed group at step 10


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"communities": 1}, "communities"), ({"drift": 1.5}, "drift"), ({"period": 0}, "period")],
)
def test_drifting_communities_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        drifting_communities(**kwargs)


def test_events_out_of_time_order_are_refused():
    with pytest.raises(ValueError, match="time"):
        TemporalEvents(
            torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([2.0, 1.0]), 2, ("a", "b")
        )


def test_chronological_split_cuts_at_the_quantiles_and_keeps_ties_together():
    times = torch.arange(100, dtype=torch.float64)
    train, val, test = chronological_split(times)
    assert (int(train.sum()), int(val.sum()), int(test.sum())) == (70, 15, 15)
    assert float(times[train].max()) < float(times[val].min()) <= float(times[val].max())
    assert float(times[val].max()) < float(times[test].min())
    tied = torch.tensor([0.0, 1.0, 1.0, 1.0, 2.0, 3.0])
    part = torch.stack(chronological_split(tied)).int().argmax(0)  # each event's part
    for t in tied.unique():
        assert len(part[tied == t].unique()) == 1  # events at one time stay together


def test_period_communities_are_the_groups_of_the_synthetic_stream():
    events = drifting_communities(num_nodes=40, communities=4, steps=30, period=10, drift=0.5)
    found = period_communities(events, 10)
    assert sorted(found) == [0, 1, 2]
    index = (events.time // 10).long()
    for p, labels in found.items():
        inside = index == p
        src, dst = events.src[inside], events.dst[inside]
        assert bool((labels[src] == labels[dst]).all())  # links stay inside a community
        assert bool((labels[src] >= 0).all())
        assert len(set(labels[labels >= 0].tolist())) == 4  # 200 links a period join each group
    assert not torch.equal(found[0], found[1])  # half the nodes moved at step 10
    with pytest.raises(ValueError, match="period"):
        period_communities(events, 0)
