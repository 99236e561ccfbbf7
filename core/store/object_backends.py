"""Object stores a lineage store can live on: write-once objects under a URL prefix.

A store on object storage (:mod:`~dslog_dagster.core.store.remote`) needs five things from
the service: list the objects under its prefix, read one, create one *only if no object of
that name exists* (first writer wins, as ``os.link`` gives a local store), tell whether one
exists, and delete one (compaction retires replaced segments). Two backends give them:

* :class:`S3Objects` — S3 and S3-compatible services through ``boto3`` (the ``[s3]`` extra).
  A create is a ``PutObject`` with ``If-None-Match: *``: the service refuses it atomically
  when the name exists, so two writers never both win.
* :class:`FsspecObjects` — any other ``fsspec`` file system (``gs://``, ``az://``,
  ``memory://``, ...). ``fsspec`` has no portable conditional create, so a create checks that
  the name is free, writes, and reads the object back: a writer whose bytes are not the ones
  stored lost the race and says so. The only names two writers can share are array records
  of the same ``(name, version)``, whose bytes carry a checksum, so a reader never takes a
  mix of two writers' bytes for a record (see ``docs/limits.md``).

Every service failure becomes an error of our tree that says what to do: a missing bucket,
refused credentials, an unreachable endpoint, a missing extra.
"""

import os
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from dslog_dagster.errors import (
    ConfigurationError,
    LineageStorageError,
    MissingExtraError,
    StorePermissionError,
)

REMOTE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
"""URL schemes a store can live on (``file://`` is a local folder, opened as a path)."""
_FSSPEC_EXTRA = {"gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}
_DENIED = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "AllAccessDisabled",
        "403",
    }
)
_EXISTS = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_ABSENT = frozenset({"NoSuchKey", "404", "NotFound"})


def is_url(root: object) -> bool:
    """Whether ``root`` names a store by URL (``scheme://...``) rather than by path."""
    return isinstance(root, str) and "://" in root and not root.startswith("file://")


class ObjectBackend(Protocol):
    """The operations a store on object storage uses (keys are relative to the prefix)."""

    url: str

    def list(self) -> dict[str, int]:
        """Every object under the prefix: key -> size."""

    def get(self, key: str) -> bytes:
        """The bytes of ``key``; ``FileNotFoundError`` when there is no such object."""

    def put_once(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` unless it exists; ``False`` when it existed."""

    def exists(self, key: str) -> bool:
        """Whether object ``key`` exists."""

    def delete(self, key: str) -> None:
        """Delete ``key`` (no error when it is already gone)."""


def open_backend(url: str, options: Mapping[str, Any] | None = None) -> ObjectBackend:
    """The backend for store URL ``url`` (``options`` go to the client: ``endpoint_url``,
    ``key``/``secret``, ``region_name`` for S3; anything ``fsspec`` takes otherwise).

    Raises:
        ConfigurationError: an unknown scheme, or a URL without a bucket.
        MissingExtraError: the client library is not installed (the message names the extra).
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in REMOTE_SCHEMES:
        known = ", ".join(f"`{s}://`" for s in REMOTE_SCHEMES)
        msg = (
            f"Store URL `{url}`: unknown scheme `{scheme}://`. A store lives in a local folder "
            f"(a path or `file://`) or on object storage: {known}."
        )
        raise ConfigurationError(msg)
    if not parts.netloc:
        msg = f"Store URL `{url}` names no bucket; write `{scheme}://BUCKET/PREFIX`."
        raise ConfigurationError(msg)
    prefix = parts.path.strip("/")
    if scheme in ("s3", "s3a"):
        return S3Objects(url, parts.netloc, prefix, dict(options or {}))
    return FsspecObjects(url, scheme, f"{parts.netloc}/{prefix}".rstrip("/"), dict(options or {}))


def _missing_extra(url: str, module: str, extra: str, e: ImportError) -> MissingExtraError:
    msg = (
        f"The lineage store at `{url}` needs `{module}`, which is not installed ({e}). "
        f"Install the extra: pip install 'dslog-dagster[{extra}]'."
    )
    return MissingExtraError(msg)


class S3Objects:
    """A prefix of an S3 (or S3-compatible) bucket, through ``boto3``.

    The endpoint is ``options["endpoint_url"]``, else ``$AWS_ENDPOINT_URL_S3`` /
    ``$AWS_ENDPOINT_URL`` (as the AWS tools read them), else AWS itself; credentials come
    from ``options`` (``key``, ``secret``, ``token``) or boto3's usual chain.
    """

    def __init__(self, url: str, bucket: str, prefix: str, options: dict[str, Any]) -> None:
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError as e:
            raise _missing_extra(url, "boto3", "s3", e) from e
        self.url = url.rstrip("/")
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self._errors = botocore.exceptions
        endpoint = options.pop("endpoint_url", None) or os.environ.get("AWS_ENDPOINT_URL_S3")
        config = botocore.config.Config(
            connect_timeout=float(options.pop("connect_timeout", 10)),
            read_timeout=float(options.pop("read_timeout", 60)),
            retries={"max_attempts": int(options.pop("max_attempts", 3)), "mode": "standard"},
        )
        self.endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL") or "AWS"
        session = boto3.session.Session(
            aws_access_key_id=options.pop("key", None),
            aws_secret_access_key=options.pop("secret", None),
            aws_session_token=options.pop("token", None),
            region_name=options.pop("region_name", None),
        )
        try:
            self.client = session.client("s3", endpoint_url=endpoint, config=config, **options)
        except (TypeError, ValueError, self._errors.BotoCoreError) as e:
            msg = f"Cannot set up the S3 client for `{url}`: {e}. Check the store's options."
            raise ConfigurationError(msg) from e

    def _error(self, e: Exception, doing: str) -> LineageStorageError:
        """Our error for a failed request, saying what to do."""
        where = f"`{self.url}` (endpoint {self.endpoint})"
        if isinstance(e, self._errors.NoCredentialsError):
            msg = (
                f"Cannot {doing} in the lineage store at {where}: no credentials found. Set "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or pass `key`/`secret` "
                "in the store's options."
            )
            return StorePermissionError(msg)
        if isinstance(e, self._errors.ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            if code == "NoSuchBucket":
                msg = (
                    f"Cannot {doing} in the lineage store at {where}: bucket `{self.bucket}` "
                    f"does not exist. Create it (`aws s3 mb s3://{self.bucket}`) or fix the URL."
                )
                return LineageStorageError(msg)
            if code in _DENIED:
                msg = (
                    f"Cannot {doing} in the lineage store at {where}: the service refused the "
                    f"credentials ({code}: {err.get('Message', '')}). Check AWS_ACCESS_KEY_ID/"
                    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and that they may read, write, list "
                    f"and delete under `{self.url}/`."
                )
                return StorePermissionError(msg)
            msg = f"Cannot {doing} in the lineage store at {where}: {code}: {err.get('Message')}."
            return LineageStorageError(msg)
        msg = (
            f"Cannot {doing} in the lineage store at {where}: {e}. Check the endpoint and the "
            "network, then run again."
        )
        return LineageStorageError(msg)

    def _code(self, e: Exception) -> str:
        if isinstance(e, self._errors.ClientError):
            return str(e.response.get("Error", {}).get("Code", ""))
        return ""

    def list(self) -> dict[str, int]:
        out: dict[str, int] = {}
        try:
            pages = self.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for obj in page.get("Contents", ()):
                    out[str(obj["Key"])[len(self.prefix) :]] = int(obj["Size"])
        except Exception as e:
            raise self._error(e, "list the objects") from e
        return out

    def get(self, key: str) -> bytes:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
            return bytes(body.read())
        except Exception as e:
            if self._code(e) in _ABSENT:
                msg = f"{self.url}/{key}"
                raise FileNotFoundError(msg) from e
            raise self._error(e, f"read `{key}`") from e

    def put_once(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=data, IfNoneMatch="*"
            )
        except Exception as e:
            if self._code(e) in _EXISTS:
                return False
            raise self._error(e, f"write `{key}`") from e
        return True

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as e:
            if self._code(e) in _ABSENT:
                return False
            raise self._error(e, f"look up `{key}`") from e
        return True

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as e:
            if self._code(e) not in _ABSENT:
                raise self._error(e, f"delete `{key}`") from e


class FsspecObjects:
    """A folder of any ``fsspec`` file system (creates checked by reading back: see the
    module docstring)."""

    def __init__(self, url: str, scheme: str, root: str, options: dict[str, Any]) -> None:
        try:
            import fsspec
        except ImportError as e:  # pragma: no cover - universal-pathlib brings fsspec
            raise _missing_extra(url, "fsspec", "s3", e) from e
        self.url = url.rstrip("/")
        self.root = root
        try:
            self.fs = fsspec.filesystem(scheme, **options)
        except ImportError as e:
            module = _FSSPEC_EXTRA.get(scheme, scheme)
            msg = (
                f"The lineage store at `{url}` needs `{module}` (the fsspec driver of "
                f"`{scheme}://`), which is not installed ({e}). Install it: pip install {module}."
            )
            raise MissingExtraError(msg) from e
        except (TypeError, ValueError) as e:
            msg = f"Cannot open `{url}`: {e}. Check the store's options."
            raise ConfigurationError(msg) from e

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _error(self, e: Exception, doing: str) -> LineageStorageError:
        if isinstance(e, PermissionError):
            msg = f"Cannot {doing} in the lineage store at `{self.url}`: {e}. Check credentials."
            return StorePermissionError(msg)
        msg = f"Cannot {doing} in the lineage store at `{self.url}`: {e}."
        return LineageStorageError(msg)

    def list(self) -> dict[str, int]:
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return {}
        except Exception as e:
            raise self._error(e, "list the objects") from e
        start = len(self.root.lstrip("/")) + 1
        return {
            str(name).lstrip("/")[start:]: int(info.get("size") or 0)
            for name, info in found.items()
            if info.get("type") != "directory"
        }

    def get(self, key: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except FileNotFoundError:
            raise
        except Exception as e:
            raise self._error(e, f"read `{key}`") from e

    def put_once(self, key: str, data: bytes) -> bool:
        if self.exists(key):
            return False
        try:
            self.fs.pipe_file(self._path(key), data)
            return self.get(key) == data  # another writer's bytes: it won
        except Exception as e:
            raise self._error(e, f"write `{key}`") from e

    def exists(self, key: str) -> bool:
        try:
            return bool(self.fs.exists(self._path(key)))
        except Exception as e:
            raise self._error(e, f"look up `{key}`") from e

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            return
        except Exception as e:
            raise self._error(e, f"delete `{key}`") from e
