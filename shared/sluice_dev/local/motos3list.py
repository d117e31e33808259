"""moto's S3 ListObjectsV2, answered without moto's generic serializer (local stack only).

Tansu's S3 storage engine lists every object of a partition (one object per produced batch, and
the gateway produces one job a batch) at each fetch. moto renders each listed key through its
model-driven XML serializer, about 0.4 ms a key on this machine: a partition of 2,500 one-job
batches took a second to list, more than the relay's ``fetch_max_wait_ms`` (100), so Tansu answered
every fetch empty and the relay read nothing at all. A 10,000-job chaos run's relay pushed next to
nothing after its first three minutes, and a long-running ``sluice dev`` would do the same. The
listing itself (moto's backend, unchanged) is cheap; this writes its XML directly.

Only the plain form is answered here (no delimiter, no ``fetch-owner``; ``encoding-type`` absent or
``url``, as boto3 sends it): any other request goes to moto's own handler, as before.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import escape

_INSTALLED = "_sluice_fast_list"
_PLAIN = frozenset({"list-type", "prefix", "start-after", "continuation-token", "max-keys", "encoding-type"})
_ADDED = frozenset({"BucketName", "Action"})  # moto's own, set on every request
_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'


def install() -> None:
    """Replaces ``S3Response.list_objects_v2`` with a fast path for the plain form (idempotent)."""
    from moto.s3.responses import S3Response

    original = S3Response.list_objects_v2
    if getattr(original, _INSTALLED, False):
        return

    def list_objects_v2(self: Any) -> Any:
        query = {k: v for k, v in self.querystring.items() if k not in _ADDED}
        token = query.get("continuation-token", [None])[0]
        encoding = query.get("encoding-type", [None])[0]
        if set(query) - _PLAIN or token == "" or encoding not in (None, "url"):
            return original(self)  # moto's own answer (and its errors)
        from moto import settings

        bucket = self.backend.get_bucket(self.bucket_name)
        prefix = self._get_querystring(self.request, self.uri).get("prefix", [None])[0]
        if isinstance(prefix, bytes):
            prefix = prefix.decode("utf-8")
        max_keys = int(query.get("max-keys", [settings.get_s3_default_max_keys()])[0])
        start_after = query.get("start-after", [None])[0]
        keys, truncated, next_token = self.backend.list_objects_v2(
            bucket=bucket, prefix=prefix, delimiter=None, continuation_token=token,
            start_after=start_after, max_keys=max_keys)
        return 200, {"Content-Type": "application/xml"}, render(
            bucket.name, prefix or "", max_keys, keys, truncated, next_token,
            start_after if not token else None, url=encoding == "url")

    setattr(list_objects_v2, _INSTALLED, True)
    S3Response.list_objects_v2 = list_objects_v2  # type: ignore[method-assign]


def render(bucket: str, prefix: str, max_keys: int, keys: Any, truncated: bool, next_token: str | None,
           start_after: str | None, *, url: bool = False) -> str:
    """The ListBucketResult document S3 returns for a ListObjectsV2 without a delimiter (``url``:
    with ``encoding-type=url``, names and prefix URL-encoded, as moto encodes them)."""
    rows = sorted((k for k in keys if not isinstance(k, str)), key=lambda k: k.name)
    name = quote if url else str
    parts = [_HEAD, f"<Name>{escape(bucket)}</Name><Prefix>{escape(name(prefix))}</Prefix>",
             f"<MaxKeys>{max_keys}</MaxKeys><KeyCount>{len(rows)}</KeyCount>",
             f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
    parts += [f"<Contents><Key>{escape(name(k.name))}</Key>"
              f"<LastModified>{k.last_modified_ISO8601}</LastModified><ETag>{escape(k.etag)}</ETag><Size>{k.size}</Size>"
              f"<StorageClass>{escape(k.storage_class)}</StorageClass></Contents>" for k in rows]
    if next_token:
        parts.append(f"<NextContinuationToken>{escape(next_token)}</NextContinuationToken>")
    if start_after:
        parts.append(f"<StartAfter>{escape(start_after)}</StartAfter>")
    if url:
        parts.append("<EncodingType>url</EncodingType>")
    parts.append("</ListBucketResult>")
    return "".join(parts)
