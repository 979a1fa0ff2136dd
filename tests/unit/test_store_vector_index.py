import numpy as np
import pytest

from learnerd.store.vector_index import VectorIndex


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def brute_force(ids: list[str], matrix: np.ndarray, q: np.ndarray, k: int) -> list[str]:
    order = np.argsort(-(matrix @ q), kind="stable")[:k]
    return [ids[i] for i in order]


def test_search_matches_brute_force_inner_product():
    rng = np.random.default_rng(0)
    vectors = unit(rng, 500, 32)
    ids = [f"ex{i}" for i in range(500)]
    index = VectorIndex(32, initial_capacity=4)
    index.upsert(ids, vectors)
    q = unit(rng, 1, 32)[0]
    got = index.search(q, 10)
    assert [i for i, _ in got] == brute_force(ids, vectors, q, 10)
    assert got[0][1] == pytest.approx(float(vectors[int(got[0][0][2:])] @ q), rel=1e-5)


def test_capacity_grows_geometrically_and_keeps_rows():
    index = VectorIndex(4, initial_capacity=2)
    rng = np.random.default_rng(1)
    vectors = unit(rng, 9, 4)
    for i in range(9):
        index.upsert([f"k{i}"], vectors[i : i + 1])
    assert index.capacity == 16
    assert len(index) == 9
    for i in range(9):
        np.testing.assert_array_equal(index.get(f"k{i}"), vectors[i])


def test_upsert_of_existing_id_reuses_its_row():
    index = VectorIndex(2)
    index.upsert(["a", "b"], np.array([[1, 0], [0, 1]], dtype=np.float32))
    index.upsert(["a"], np.array([[0, 1]], dtype=np.float32))
    assert len(index) == 2
    np.testing.assert_array_equal(index.get("a"), [0, 1])


def test_delete_swaps_last_row_into_the_hole():
    index = VectorIndex(2)
    vectors = np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)
    index.upsert(["a", "b", "c"], vectors)
    assert index.delete(["a", "zzz"]) == 1
    assert len(index) == 2 and "a" not in index
    np.testing.assert_array_equal(index.get("c"), vectors[2])
    np.testing.assert_array_equal(index.get("b"), [0, 1])
    assert [i for i, _ in index.search(np.array([1, 0], dtype=np.float32), 5)] == ["c", "b"]


def test_search_on_small_or_empty_index():
    assert VectorIndex(3).search(np.ones(3, dtype=np.float32), 5) == []
    assert VectorIndex().search(np.ones(3, dtype=np.float32), 5) == []
    index = VectorIndex()
    index.upsert(["x"], np.array([[0.0, 1.0]], dtype=np.float32))
    assert index.dim == 2
    assert index.search(np.array([0.0, 1.0], dtype=np.float32), 3) == [("x", pytest.approx(1.0))]


def test_wrong_shape_is_refused():
    index = VectorIndex(3)
    with pytest.raises(ValueError, match="shape"):
        index.upsert(["a"], np.zeros((1, 4), dtype=np.float32))
