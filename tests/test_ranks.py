"""Representative ranks: classes, siblings and --ranks parsing (phantom.distributed.ranks)."""
import pytest

from phantom.distributed.ranks import RankClasses, family_key, parse_ranks, translate


def mesh_groups(shape: tuple[int, ...]) -> dict[str, list[tuple[int, ...]]]:
    """The groups DeviceMesh creates for a row-major mesh, by dimension name d0, d1, ..."""
    import numpy as np

    ranks = np.arange(int(np.prod(shape))).reshape(shape)
    out = {}
    for dim in range(len(shape)):
        moved = np.moveaxis(ranks, dim, -1).reshape(-1, shape[dim])
        out[f"d{dim}"] = [tuple(int(r) for r in row) for row in moved]
    return out


def test_family_key_is_the_member_offsets():
    assert family_key((3, 11, 19)) == (0, 8, 16)
    assert family_key((8, 9, 10)) == family_key((0, 1, 2))


def test_one_class_before_any_point_to_point():
    groups = mesh_groups((4, 8))  # dp x tp
    rc = RankClasses(32, [0])
    rc.add_groups(groups["d0"] + groups["d1"])
    assert {rc.representative(r) for r in range(32)} == {0}
    assert rc.classes() == {0: list(range(32))}


def test_siblings_of_a_collective_are_the_other_groups_of_its_family():
    groups = mesh_groups((4, 8))  # dp groups {k, k+8, ...}, tp groups {8j .. 8j+7}
    rc = RankClasses(32, [0])
    rc.add_groups(groups["d0"] + groups["d1"])
    dp0 = (0, 8, 16, 24)
    assert sorted(rc.siblings(dp0)) == [(k, k + 8, k + 16, k + 24) for k in range(1, 8)]
    tp0 = tuple(range(8))
    assert len(rc.siblings(tp0)) == 3
    assert rc.siblings(tuple(range(32))) == []  # the world group has no sibling


def test_pipeline_send_splits_the_classes():
    # pp=2 x dp=4: stage 0 = ranks 0-3, stage 1 = ranks 4-7
    groups = mesh_groups((2, 4))
    rc = RankClasses(8, [0])
    rc.add_groups(groups["d0"] + groups["d1"])
    rc.add_running(4)
    rc.saw_p2p((0, 4))  # 0 sends to 4 in its pp group
    assert rc.classes() == {0: [0, 1, 2, 3], 4: [4, 5, 6, 7]}
    # the pp groups {1,5}, {2,6}, {3,7} run the same transfer, nobody runs them
    assert sorted(rc.siblings((0, 4))) == [(1, 5), (2, 6), (3, 7)]
    # each dp group has its own running rank: no sibling to copy
    assert rc.siblings((0, 1, 2, 3)) == []


def test_siblings_stay_within_the_classes_of_the_collective():
    # pp=2 x dp=2 x tp=2: tp groups of stage 1 must not copy stage 0's tp collectives
    groups = mesh_groups((2, 2, 2))
    rc = RankClasses(8, [0, 4])
    rc.add_groups(groups["d0"] + groups["d1"] + groups["d2"])
    rc.saw_p2p((0, 4))
    assert rc.classes() == {0: [0, 1, 2, 3], 4: [4, 5, 6, 7]}
    assert rc.siblings((0, 1)) == [(2, 3)]
    assert rc.siblings((4, 5)) == [(6, 7)]


def test_translate_keeps_the_position_in_the_group():
    assert translate(8, (0, 8, 16), (1, 9, 17)) == 9
    with pytest.raises(ValueError):
        translate(5, (0, 8), (1, 9))


def test_parse_ranks():
    assert parse_ranks("all", 4) == [0, 1, 2, 3]
    assert parse_ranks("auto", 4) is None
    assert parse_ranks("8, 0,16", 32) == [0, 8, 16]
    with pytest.raises(ValueError, match="outside the world"):
        parse_ranks("0,40", 32)
    with pytest.raises(ValueError, match="expected 'auto', 'all'"):
        parse_ranks("some", 32)
