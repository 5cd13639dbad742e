"""FederatedDataset: client views, shares, identity and the shared tensors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fedgame.data import FederatedDataset, fingerprint, make_split, partition


def split(n: int = 120) -> tuple[FederatedDataset, list[np.ndarray]]:
    g = np.random.default_rng(0)
    x = g.integers(0, 256, (n, 1, 4, 4), dtype=np.uint8)
    s = make_split(train_x=x, train_y=np.arange(n) % 3, test_x=x[:10], test_y=np.arange(10) % 3, classes=3, name="toy")
    parts = partition("dirichlet", s.train.y, 4, np.random.default_rng(1), alpha=1.0, min_size=5)
    return FederatedDataset.from_split(s, parts), parts


def test_clients_sizes_theta_fingerprint() -> None:
    fd, parts = split()
    assert fd.n_clients == 4
    np.testing.assert_array_equal(fd.sizes, [p.size for p in parts])
    assert fd.theta.sum() == pytest.approx(1.0) and np.all(fd.theta > 0)
    assert fd.fingerprint == fingerprint(parts)
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(fd.client_x(i), fd.train.x[p])
        np.testing.assert_array_equal(fd.client_y(i), fd.train.y[p])
    np.testing.assert_array_equal(fd.label_counts().sum(axis=0), np.bincount(fd.train.y))
    with pytest.raises(IndexError, match=r"client: must be an integer in \[0, 3\], got 4"):
        fd.client_x(4)


def test_as_tensors_share_memory_and_are_cached() -> None:
    fd, _ = split()
    x, y, tx, ty = fd.as_tensors()
    assert x.dtype == torch.float32 and y.dtype == torch.int64 and tuple(x.shape) == (120, 1, 4, 4)
    assert x.data_ptr() == fd.train.x.__array_interface__["data"][0]  # no copy
    assert fd.as_tensors()[0] is x
    np.testing.assert_array_equal(ty.numpy(), fd.test.y)


def test_parts_are_validated() -> None:
    fd, parts = split()
    bad = [parts[0], np.concatenate([parts[1], parts[0][:1]])]
    with pytest.raises(ValueError, match="is used 2 times"):
        FederatedDataset(train=fd.train, test=fd.test, parts=tuple(bad))
    with pytest.raises(ValueError, match=r"parts\[0\]: indices must be in \[0, 119\]"):
        FederatedDataset(train=fd.train, test=fd.test, parts=(np.array([120]),))
    # a truncated training set (max_train) keeps working through dataclasses.replace
    small = dataclasses.replace(fd.train, x=fd.train.x[:60], y=fd.train.y[:60])
    sub = [p[p < 60] for p in parts]
    assert FederatedDataset(train=small, test=fd.test, parts=tuple(sub)).sizes.sum() == 60
