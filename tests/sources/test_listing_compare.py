"""The walk's comparison of a directory's listing with the previous one, in step
(confinement.unknown_names): whatever the order, the deletions, the names registered meanwhile or
never, it reports exactly the names not known, and what it keeps for the next look is known."""

import random

import pytest

from inventory.services import confinement
from inventory.services.confinement import _END, unknown_names


def _check(listing, previous, known):
    unseen, kept = unknown_names(list(listing), previous, known)
    assert sorted(unseen) == sorted(name for name in listing if name not in known)
    assert kept[-1] is _END and all(name in known for name in kept[:-1])
    assert [name for name in listing if name in known] == kept[:-1]
    return kept


@pytest.mark.parametrize("out_of_step", [256, 3])
def test_in_step_comparison_reports_exactly_the_unknown_names_under_random_changes(
    monkeypatch, out_of_step
):
    monkeypatch.setattr(confinement, "_OUT_OF_STEP", out_of_step)  # both ways to the rest
    rng = random.Random(48)
    for case in range(400):
        names = [b"f%06d.csv" % n for n in rng.sample(range(10**6), rng.randrange(0, 300))]
        known = set(rng.sample(names, len(names) * rng.randrange(0, 11) // 10))
        previous = _check(names, None, known)
        for _ in range(4):
            listing = list(names)
            for _ in range(rng.randrange(0, 20)):  # new files, anywhere
                listing.insert(rng.randrange(len(listing) + 1), b"n%08d.csv" % rng.randrange(10**8))
            for _ in range(rng.randrange(0, 20)):  # deletions, in runs
                if not listing:
                    break
                at = rng.randrange(len(listing))
                del listing[at : at + rng.randrange(1, 25)]
            if case % 7 == 0:
                rng.shuffle(listing)  # a file system that lists in another order
            listing = list(dict.fromkeys(listing))  # a directory's names are unique
            # some registered meanwhile (by this look or another process), including unlisted ones
            known |= set(rng.sample(listing, len(listing) // 3)) | {b"elsewhere.csv"}
            previous = _check(listing, previous, known)
            names = listing


def test_a_listing_in_step_compares_names_with_their_neighbour_and_probes_only_the_rest(
    monkeypatch,
):
    names = [b"f%05d" % n for n in range(5000)]
    known = set(names)
    previous = _check(names, None, known)

    class Counting(set):
        probes = 0

        def __contains__(self, name):
            Counting.probes += 1
            return super().__contains__(name)

    counted = Counting(known)
    listing = list(names)
    for at in (10, 2000, 4999):
        listing.insert(at, b"new%d" % at)
    del listing[3000:3005]
    unseen, _kept = unknown_names(listing, previous, counted)
    assert sorted(unseen) == [b"new10", b"new2000", b"new4999"]
    assert Counting.probes <= 8  # the three new names and the name after the deleted run


def test_another_order_falls_back_to_the_set_difference(monkeypatch):
    monkeypatch.setattr(confinement, "_OUT_OF_STEP", 5)
    names = [b"f%04d" % n for n in range(1000)]
    known = set(names)
    previous = _check(names, None, known)
    listing = names[::-1] + [b"late"]
    assert _check(listing, previous, known | {b"other"})
