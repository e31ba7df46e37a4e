"""The suite's own order under ``-n N --dist worksteal`` (``tests/conftest.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from conftest import LONG_TESTS, _dealt, _start_order


@dataclass
class _Item:
    name: str
    markers: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def test_each_workers_slice_begins_with_its_share_of_the_long_tests() -> None:
    items = [_Item(f"fast{i}", {"fast"}) for i in range(9)]
    items += [_Item(f"book{i}", {"book"}) for i in range(4)]
    items += [_Item("nb", {"notebooks"}), _Item("page", {"pages"}), _Item(LONG_TESTS[0], {"book"})]
    items.sort(key=_start_order)
    assert [i.name for i in items[:3]] == ["nb", "page", LONG_TESTS[0]]
    dealt = _dealt(items, 2)
    assert sorted(i.name for i in dealt) == sorted(i.name for i in items)  # nothing dropped
    first, second = dealt[:8], dealt[8:]  # worksteal: len // 2 to the first worker
    assert [i.name for i in first[:2]] == ["nb", LONG_TESTS[0]]
    assert second[0].name == "page"
    assert all("fast" in i.markers for i in dealt[-5:])  # what an idle worker takes over
