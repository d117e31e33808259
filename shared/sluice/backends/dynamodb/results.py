"""Results too large for a DynamoDB item live in S3; the item keeps a pointer.

The object key contains the job's queue, the fencing token and the digest of the content
(``results/<queue>/<job_id>/<token>/<sha256>.json``). The queue prefix is the job id's own
(``<ULID>.<queue>.<mac>``), so a team's role reaches its queues' results only
(``results/<queue>/*``, infra/team.yaml), and a reader derives the key's prefix from the job it
reads (``job_result_key``): an item's ``result_ref`` pointing anywhere else is not followed, so a
team that points its own item at another team's result cannot read it through GET (issue 27).
Results written before issue 27 (``results/<job_id>/...``) stay readable by the same rule (the
job id is in the key) until the bucket's lifecycle rule expires them, one retention period on.

The upload happens before the fenced item write, so a stale writer does upload; but its object
can never replace the one the current item points to: another token gives another key, and the
same token with other content (a non-deterministic handler retried) gives another key
too. Objects of refused writes are orphans; the bucket's lifecycle rule
(``tables.create_results_bucket``) expires them after the job retention.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.backends.dynamodb.errors import translated
from sluice.core.errors import StoreError
from sluice.core.ids import queue_in_id
from sluice.core.models import dump_json, validate_job_id, validate_token

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

RESULTS_PREFIX = "results"
_KEY_TAIL = re.compile(r"[1-9][0-9]{0,15}/[0-9a-f]{64}\.json")
queue_of_id = queue_in_id  # results/<queue>/...: the id's queue ("_" for an id without one)


def result_key(job_id: str, token: int, digest: str) -> str:
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise StoreError(f"not a sha256 hex digest: {digest!r}")
    job_id = validate_job_id(job_id)
    return f"{RESULTS_PREFIX}/{queue_of_id(job_id)}/{job_id}/{validate_token(token)}/{digest}.json"


def job_result_key(ref: str, job_id: str, bucket: str | None) -> str:
    """The key of ``ref`` if it is ``job_id``'s own result in ``bucket``; StoreError otherwise.

    Derived from the job, not trusted from the item: ``results/<queue of the id>/<id>/<token>/
    <digest>.json``, or the pre-issue-27 ``results/<id>/<token>/<digest>.json``."""
    ref_bucket, key = parse_ref(ref)
    job_id = validate_job_id(job_id)
    for prefix in (f"{RESULTS_PREFIX}/{queue_of_id(job_id)}/{job_id}/", f"{RESULTS_PREFIX}/{job_id}/"):
        if key.startswith(prefix) and _KEY_TAIL.fullmatch(key[len(prefix):]) and \
                (bucket is None or ref_bucket == bucket):
            return key
    raise StoreError(f"the result reference of job {job_id} does not name its own result ({ref[:200]!r}); "
                     "not read")


@dataclass(frozen=True, slots=True)
class EncodedResult:
    """A result ready to store: canonical JSON, its digest, and where the bytes go."""

    text: str
    digest: str
    size: int

    @classmethod
    def of(cls, value: Any) -> EncodedResult:
        """Canonical JSON (sorted keys, no NaN) or InvalidInput before anything is written."""
        text = dump_json(value)
        data = text.encode("utf-8")
        return cls(text=text, digest=hashlib.sha256(data).hexdigest(), size=len(data))


class S3ResultSink:
    """``ports.ResultSink`` over one bucket. Refs look like ``s3://bucket/key``."""

    def __init__(self, client: S3Client | None, bucket: str, *,
                 build_client: Callable[[], S3Client] | None = None) -> None:
        """``client``: an S3 client; or None and ``build_client``, called on the first put or get.

        Most results fit the item, so most containers never touch S3: building its client (and
        loading its botocore model) at start-up would cost every cold start for nothing.
        """
        if client is None and build_client is None:
            raise StoreError("S3ResultSink needs an S3 client or a way to build one")
        self._client = client
        self._build = build_client if client is None else None
        self._lock = threading.Lock()  # the store's threads may be the first to need it
        self.bucket = bucket

    @property
    def _s3(self) -> S3Client:
        if self._build is not None:
            with self._lock:
                if self._build is not None:
                    self._client, self._build = self._build(), None
        assert self._client is not None
        return self._client

    def put(self, key: str, body: bytes) -> str:
        with translated("s3.put_object"):
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")
        return f"s3://{self.bucket}/{key}"

    def get(self, ref: str) -> bytes:
        bucket, key = parse_ref(ref)
        with translated("s3.get_object"):
            response = self._s3.get_object(Bucket=bucket, Key=key)
            return response["Body"].read()


def parse_ref(ref: str) -> tuple[str, str]:
    if not ref.startswith("s3://") or "/" not in ref[5:]:
        raise StoreError(f"malformed result reference {ref!r}")
    bucket, _, key = ref[5:].partition("/")
    return bucket, key
