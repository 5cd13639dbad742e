"""Datasets and their federated partitions.

* :func:`load_dataset` reads a dataset the user has on disk (IDX, CIFAR pickles, SVHN .mat,
  image folders) into a normalised :class:`DatasetSplit`; :func:`list_datasets` and
  :func:`dataset_info` describe what can be loaded. Nothing is downloaded.
* :func:`partition` (or :func:`iid`, :func:`dirichlet`, :func:`shards`, :func:`similarity`,
  :func:`quantity_skew`) splits the training indices among clients with an explicit
  ``numpy.random.Generator``; :func:`fingerprint` identifies the result.
* :data:`DATASETS` holds the dataset plug-ins a recipe names (``data.dataset``, options in
  ``data.options``): the catalog's, ``csv`` and ``npz`` for a user's own files, and any
  ``--plugin``'s; :func:`split_from_arrays` makes a split of arrays in memory.
* :class:`FederatedDataset` ties a split to its partition for the training loop;
  :class:`SiloDataset` is a silo federation server's, built from what each node reports
  (:class:`SiloReport`: sizes, label histogram, shapes; never an example).
"""

from __future__ import annotations

from fedgame.data._arrays import ArrayDataset, DatasetSplit, features_split, group_codes, make_split, tokens_split
from fedgame.data.catalog import (
    DatasetInfo,
    clear_cache,
    dataset_info,
    describe_datasets,
    list_datasets,
    load_dataset,
    resolve_roots,
)
from fedgame.data.datasets import DATASETS, Dataset, DatasetConfig, open_dataset, split_from_arrays
from fedgame.data.federated import FederatedDataset
from fedgame.data.memory import as_split, from_hf, from_torch, in_memory_options
from fedgame.data.partition import (
    PARTITION_KINDS,
    dirichlet,
    fingerprint,
    iid,
    label_counts,
    natural,
    load_partition,
    partition,
    quantity_skew,
    save_partition,
    shards,
    similarity,
    validate_partition,
)
from fedgame.data.readers import DatasetFormatError, DatasetNotFoundError, read_idx
from fedgame.data.silo import SiloDataset, SiloReport, check_agreement, silo_report

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetConfig",
    "open_dataset",
    "as_split",
    "from_hf",
    "from_torch",
    "in_memory_options",
    "split_from_arrays",
    "ArrayDataset",
    "DatasetSplit",
    "make_split",
    "features_split",
    "tokens_split",
    "group_codes",
    "natural",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetFormatError",
    "load_dataset",
    "list_datasets",
    "dataset_info",
    "describe_datasets",
    "resolve_roots",
    "clear_cache",
    "read_idx",
    "FederatedDataset",
    "SiloDataset",
    "SiloReport",
    "check_agreement",
    "silo_report",
    "PARTITION_KINDS",
    "partition",
    "iid",
    "dirichlet",
    "shards",
    "similarity",
    "quantity_skew",
    "fingerprint",
    "save_partition",
    "load_partition",
    "label_counts",
    "validate_partition",
]
