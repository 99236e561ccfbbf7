"""Format versions in the files' metadata, and the reader's compatibility check.

Every dslog file carries ``dslog.schema_version`` (``major-minor-patch``) in its Parquet
key-value metadata. A reader accepts any version with its own major number and refuses the
others with a message that says to upgrade, so an old dslog never misreads a newer file.
"""

from collections.abc import Mapping

from dslog_dagster.errors import SchemaVersionError


def check_version(meta: Mapping[bytes, bytes], source: str, current: str) -> None:
    """Refuse ``source`` unless its metadata ``meta`` names the major version of ``current``.

    Raises:
        SchemaVersionError: no version, or another major version.
    """
    version = meta.get(b"dslog.schema_version", b"").decode()
    if not version:
        msg = f"`{source}` is not a dslog lineage file (no `dslog.schema_version` metadata)."
        raise SchemaVersionError(msg)
    if version.split("-")[0] != current.split("-")[0]:
        msg = (
            f"`{source}` was written with lineage format {version}; this dslog reads "
            f"{current.split('-')[0]}-x-x here. Upgrade dslog-dagster to read it."
        )
        raise SchemaVersionError(msg)
