"""The prediction function's input cut again into batches of its own size, whatever Spark's Arrow
batches: what pyspark's worker accepts of an iterator UDF (never more rows out than in so far, the
same total at the end, the rows in order)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from udfs.predict import in_batches_of


def arrow_batches(sizes: list[int], single: bool, consumed: list[int]):
    """Batches of `sizes` rows (one column, or two), numbered in order; `consumed` counts the rows handed out."""
    start = 0
    for n in sizes:
        numbers = pa.array(range(start, start + n), pa.int64())
        consumed[0] += n
        start += n
        yield numbers if single else (numbers, pc.cast(numbers, pa.string()))


@pytest.mark.parametrize("single", [True, False])
@pytest.mark.parametrize(("sizes", "size", "expected"), [
    ([10_000, 10_000, 10_000], 4_096, [4_096] * 7 + [1_328]),  # split
    ([300, 300, 300, 300, 50], 1_000, [1_000, 250]),  # gathered
    ([1_000], 1_000, [1_000]),
    ([0, 5, 0, 7], 5, [5, 5, 2]),
    ([], 5, []),
])
def test_batches_are_cut_to_the_size_without_yielding_rows_not_yet_consumed(single, sizes, size, expected):
    consumed = [0]
    yielded, seen = 0, []
    for batch in in_batches_of(size, arrow_batches(sizes, single, consumed)):
        numbers = batch if single else batch[0]
        assert single == isinstance(batch, pa.Array)
        yielded += len(numbers)
        assert yielded <= consumed[0]  # pyspark's verify_output_row_limit
        if not single:
            assert batch[1].to_pylist() == [str(n) for n in numbers.to_pylist()]  # the columns stay aligned
        seen.append(numbers.to_pylist())
    assert [len(b) for b in seen] == expected
    assert [n for b in seen for n in b] == list(range(sum(sizes)))  # every row once, in order


def test_a_struct_argument_is_cut_as_a_struct():
    people = pa.StructArray.from_arrays([pa.array([1.0, None, 3.0]), pa.array(["a", "b", None])], names=["x", "y"])
    out = list(in_batches_of(2, iter([people, people])))
    assert all(isinstance(b, pa.StructArray) for b in out)
    assert [b.to_pylist() for b in out] == [people.to_pylist()[:2], people.to_pylist()[2:] + people.to_pylist()[:1],
                                            people.to_pylist()[1:]]
