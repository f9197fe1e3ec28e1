"""A backend over S3-compatible object storage (AWS S3, MinIO, Ceph, moto's server)."""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from shipyard.errors import NotFound, StorageError
from shipyard.store.backend import ObjectInfo

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class S3Backend:
    """Objects under `s3://bucket/prefix/`; S3's PUT is already atomic, so no temp keys."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        try:
            import boto3
        except ImportError as exc:
            raise StorageError("the S3 backend needs boto3: pip install 'shipyard[s3]'") from exc
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.client: S3Client = boto3.client("s3", endpoint_url=endpoint_url)

    @property
    def uri(self) -> str:
        query = f"?endpoint={self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{query}"

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except self.client.exceptions.ClientError as exc:
            if _status(exc) == 404:
                return None
            raise StorageError(f"cannot stat {key!r} in {self.uri}: {exc}") from exc
        return ObjectInfo(key, head["ContentLength"], head["LastModified"].timestamp())

    def get(self, key: str) -> bytes:
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except self.client.exceptions.NoSuchKey:
            raise NotFound(f"object {key!r} not found in {self.uri}") from None
        except self.client.exceptions.ClientError as exc:
            raise StorageError(f"cannot read {key!r} from {self.uri}: {exc}") from exc
        return obj["Body"].read()

    def put(self, key: str, data: bytes | memoryview) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=bytes(data))
        except self.client.exceptions.ClientError as exc:
            raise StorageError(f"cannot write {key!r} to {self.uri}: {exc}") from exc

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"][len(self.prefix) :]
                yield ObjectInfo(key, obj["Size"], obj["LastModified"].timestamp())

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)


def _status(exc: Any) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
