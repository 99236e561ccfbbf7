"""How lineage tables are stored (``dslog_dagster.core.format``): bytes, never directories.

Bottom up:

* :mod:`~dslog_dagster.core.format.encoding` — byte-plane encoding of int64 columns;
* :mod:`~dslog_dagster.core.format.codec` — the general-purpose codec and its level;
* :mod:`~dslog_dagster.core.format.columns` — a lineage table as encoded columns, and back;
* :mod:`~dslog_dagster.core.format.version` — format versions and the reader's check;
* :mod:`~dslog_dagster.core.format.table_file` — a table in a file of its own;
* :mod:`~dslog_dagster.core.format.blob` — a table inside a segment;
* :mod:`~dslog_dagster.core.format.parquet_writer` — the hand-written Parquet writer of
  one-operation segments;
* :mod:`~dslog_dagster.core.format.segment` — the segment files of a lineage store.

Where files live, and how they are published, is the store's business
(:mod:`dslog_dagster.core.store`).
"""

from dslog_dagster.core.format.blob import table_digest as table_digest
from dslog_dagster.core.format.blob import table_from_blob as table_from_blob
from dslog_dagster.core.format.blob import table_to_blob as table_to_blob
from dslog_dagster.core.format.codec import Codec as Codec
from dslog_dagster.core.format.segment import SEGMENT_SCHEMA_VERSION as SEGMENT_SCHEMA_VERSION
from dslog_dagster.core.format.segment import Segment as Segment
from dslog_dagster.core.format.segment import segment_to_bytes as segment_to_bytes
from dslog_dagster.core.format.table_file import SCHEMA_VERSION as SCHEMA_VERSION
from dslog_dagster.core.format.table_file import encoded_size as encoded_size
from dslog_dagster.core.format.table_file import read_table as read_table
from dslog_dagster.core.format.table_file import table_from_bytes as table_from_bytes
from dslog_dagster.core.format.table_file import table_to_bytes as table_to_bytes
from dslog_dagster.core.format.table_file import write_table as write_table

__all__ = [
    "SCHEMA_VERSION",
    "SEGMENT_SCHEMA_VERSION",
    "Codec",
    "Segment",
    "encoded_size",
    "read_table",
    "segment_to_bytes",
    "table_digest",
    "table_from_blob",
    "table_from_bytes",
    "table_to_blob",
    "table_to_bytes",
    "write_table",
]
