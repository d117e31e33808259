"""Every hostile-input case of issue 5, through the handler, with its exact status.

Each case also checks that nothing reached Kafka and nothing reached the jobs table.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.unit.test_gateway_fakes import Rig, unavailable

JOBS = "/v1/queues/emails/jobs"
BATCH = "/v1/queues/emails/jobs/batch"


@pytest.fixture
def rig() -> Rig:
    return Rig(max_payload_bytes=4096)


def refused(rig: Rig, status: int, method: str, path: str, body: object = None,
            **kw: object) -> dict[str, object]:
    code, headers, doc = rig.call(method, path, body, **kw)  # type: ignore[arg-type]
    assert code == status, doc
    assert headers["content-type"] == "application/problem+json"
    assert {"type", "title", "status", "detail"} <= set(doc)
    assert doc["status"] == status
    assert rig.log.records == [] and rig.store.items == {}
    return doc  # type: ignore[no-any-return]


# -- size ---------------------------------------------------------------------------------------

def test_payload_over_the_limit_is_413(rig: Rig) -> None:
    doc = refused(rig, 413, "POST", JOBS, {"payload": "x" * 4095})  # 4097 bytes as JSON
    assert "4096" in doc["detail"]


def test_payload_at_the_limit_is_accepted(rig: Rig) -> None:
    code, _, _ = rig.call("POST", JOBS, {"payload": "x" * 4094})  # exactly 4096 bytes as JSON
    assert code == 202


def test_body_far_over_the_limit_is_413_before_parsing(rig: Rig) -> None:
    refused(rig, 413, "POST", JOBS, raw="[" * 200_000)


def test_limit_counts_utf8_bytes_not_characters(rig: Rig) -> None:
    refused(rig, 413, "POST", JOBS, {"payload": "é" * 2048})


def test_one_oversize_payload_in_a_batch_is_413_naming_its_index(rig: Rig) -> None:
    doc = refused(rig, 413, "POST", BATCH, {"jobs": [{"payload": 1}, {"payload": "x" * 5000}]})
    assert doc["errors"][0]["index"] == 1  # type: ignore[index]


# -- not JSON, empty, wrong content type -------------------------------------------------------

@pytest.mark.parametrize("raw", ["not json", "{", "{'payload': 1}", '{"payload": 1,}', "   "])
def test_body_that_is_not_json_is_400(rig: Rig, raw: str) -> None:
    refused(rig, 400, "POST", JOBS, raw=raw)


def test_empty_body_is_400(rig: Rig) -> None:
    refused(rig, 400, "POST", JOBS)


@pytest.mark.parametrize("raw", ["[]", "1", '"payload"', "null"])
def test_json_that_is_not_an_object_is_400(rig: Rig, raw: str) -> None:
    refused(rig, 400, "POST", JOBS, raw=raw)


@pytest.mark.parametrize(("path", "raw"), [
    (JOBS, '[{"payload": 1}, {"payload": 2}, {"payload": 3}]'),
    (JOBS, ' \n[{"payload": 1}]'),
    (BATCH, '[{"jobs": [{"payload": 1}]}, {"jobs": [{"payload": 2}]}]'),
])
def test_an_array_of_jobs_is_400_not_its_first_job_accepted_and_the_rest_dropped(
        rig: Rig, path: str, raw: str) -> None:
    """Session 36's walk: the router read a JSON array as its first element, as Powertools did, so
    `[job1, job2, job3]` was answered 202 with job1's id and jobs 2 and 3 were lost without a word."""
    doc = refused(rig, 400, "POST", path, raw=raw)
    assert doc["code"] == "BAD_BODY"
    assert "JSON array" in str(doc["detail"]) and "/jobs/batch" in str(doc["detail"])


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=b", "application/json; charset=iso-8859-1"])
def test_wrong_content_type_is_415(rig: Rig, ctype: str | None) -> None:
    refused(rig, 415, "POST", JOBS, {"payload": 1}, content_type=ctype)


def test_form_body_is_not_mistaken_for_a_job(rig: Rig) -> None:
    refused(rig, 415, "POST", JOBS, raw="payload=1", content_type="application/x-www-form-urlencoded")


# -- encoding --------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [b'{"payload": "\xff"}', b'{"payload": "\xed\xa0\x80"}',
                                 b'{"payload": "\xc0\xaf"}'])
def test_invalid_utf8_is_400(rig: Rig, raw: bytes) -> None:
    refused(rig, 400, "POST", JOBS, raw=raw, b64=True)


@pytest.mark.parametrize("raw", ['{"payload": "\\ud800"}', '{"payload": {"\\udfff": 1}}'])
def test_escaped_lone_surrogate_is_400(rig: Rig, raw: str) -> None:
    refused(rig, 400, "POST", JOBS, raw=raw)


def test_raw_lone_surrogate_in_the_event_body_is_400(rig: Rig) -> None:
    refused(rig, 400, "POST", JOBS, raw='{"payload": "\ud800"}')


def test_base64_body_is_decoded(rig: Rig) -> None:
    code, _, _ = rig.call("POST", JOBS, raw=json.dumps({"payload": "héllo"}).encode(), b64=True)
    assert code == 202
    assert rig.log.records[0].payload == "héllo"


# -- structure -------------------------------------------------------------------------------------

def test_nesting_deeper_than_64_is_400(rig: Rig) -> None:
    payload = "[" * 64 + "]" * 64  # 65 levels with the envelope
    doc = refused(rig, 400, "POST", JOBS, raw=f'{{"payload": {payload}}}')
    assert "64" in doc["detail"]


def test_nesting_of_64_is_accepted(rig: Rig) -> None:
    code, _, _ = rig.call("POST", JOBS, raw='{"payload": ' + "[" * 63 + "]" * 63 + "}")
    assert code == 202


def test_nesting_that_would_raise_recursion_error_is_400(rig: Rig) -> None:
    refused(rig, 400, "POST", BATCH, raw='{"jobs": [{"payload": ' + "[" * 50_000 + "]" * 50_000 + "}]}")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "[1, NaN]"])
def test_nan_and_infinity_are_400(rig: Rig, value: str) -> None:
    refused(rig, 400, "POST", JOBS, raw=f'{{"payload": {value}}}')


def test_integer_over_38_digits_is_400(rig: Rig) -> None:
    refused(rig, 400, "POST", JOBS, raw='{"payload": {"n": ' + "1" * 39 + "}}")


def test_integer_of_38_digits_is_accepted(rig: Rig) -> None:
    code, _, _ = rig.call("POST", JOBS, raw='{"payload": ' + "9" * 38 + "}")
    assert code == 202 and rig.log.records[0].payload == int("9" * 38)


@pytest.mark.parametrize("raw", ['{"payload": 1, "payload": 2}', '{"payload": {"a": 1, "a": 2}}',
                                 '{"payload": 1, "priority": 1, "priority": 2}'])
def test_duplicate_keys_are_400(rig: Rig, raw: str) -> None:
    refused(rig, 400, "POST", JOBS, raw=raw)


@pytest.mark.parametrize("field", ["queue", "run_at_ms", "lease_ms", "extra", "Payload"])
def test_unknown_fields_are_400(rig: Rig, field: str) -> None:
    doc = refused(rig, 400, "POST", JOBS, {"payload": 1, field: 1})
    assert doc["errors"] == [{"pointer": f"/{field}", "detail": doc["errors"][0]["detail"]}]  # type: ignore[index]


def test_missing_payload_is_400(rig: Rig) -> None:
    doc = refused(rig, 400, "POST", JOBS, {"priority": 1})
    assert doc["errors"][0]["pointer"] == "/payload"  # type: ignore[index]


@pytest.mark.parametrize("field", ["job_id", "attempts", "token"])
def test_client_supplied_identity_fields_are_400(rig: Rig, field: str) -> None:
    value = "01HZZZZZZZZZZZZZZZZZZZZZZZ" if field == "job_id" else 3
    doc = refused(rig, 400, "POST", JOBS, {"payload": 1, field: value})
    assert doc["errors"][0]["pointer"] == f"/{field}"  # type: ignore[index]
    assert "assigned by Sluice" in doc["errors"][0]["detail"]  # type: ignore[index]


# -- queue names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("queue", [
    "%7Bemails%7D", "{emails}", "a:b", "a%3Ab", "*", "em*ls", "a?", "%00", "a%00b", "a%0D%0Ab",
    "caf%C3%A9", "café", "Emails", "-lead", "_lead", "a" * 65, "a.b", "a%20b", "%2E%2E",
])
def test_queue_names_outside_the_pattern_are_400(rig: Rig, queue: str) -> None:
    doc = refused(rig, 400, "POST", f"/v1/queues/{queue}/jobs", {"payload": 1})
    pointers = [e["pointer"] for e in doc.get("errors") or []]  # type: ignore[attr-defined]
    assert pointers == ["#/path/queue"] or doc["code"] == "INVALID_QUEUE"


def test_empty_queue_name_is_400(rig: Rig) -> None:
    doc = refused(rig, 400, "POST", "/v1/queues//jobs", {"payload": 1})
    assert doc["code"] == "INVALID_QUEUE"


@pytest.mark.parametrize("path", ["/v1/queues/%7Bq%7D", "/v1/queues/a:b", "/v1/queues/%00", "/v1/queues/"])
def test_bad_queue_names_on_the_stats_route_are_400(rig: Rig, path: str) -> None:
    code, _, _ = rig.call("GET", path)
    assert code == 400


@pytest.mark.parametrize("queue", ["a", "0", "emails", "a-b_c", "a" * 64, "9-lives"])
def test_legal_queue_names_are_accepted(rig: Rig, queue: str) -> None:
    code, _, doc = rig.call("POST", f"/v1/queues/{queue}/jobs", {"payload": 1})
    assert code == 202 and doc["queue"] == queue


# -- numeric fields --------------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "value"), [
    ("delay_seconds", -1), ("delay_seconds", 7 * 86400 + 1), ("delay_seconds", "5"), ("delay_seconds", True),
    ("delay_seconds", False), ("delay_seconds", 1.5), ("delay_seconds", 1.0), ("delay_seconds", None),
    ("priority", -1), ("priority", 10), ("priority", True), ("priority", "1"),
    ("max_attempts", 0), ("max_attempts", 101), ("max_attempts", 2.0),
    ("max_attempts", -1), ("max_attempts", 10**12), ("max_attempts", True), ("max_attempts", "5"),
    ("lease_seconds", 0), ("lease_seconds", 43201), ("lease_seconds", -30), ("lease_seconds", 0.5),
])
def test_out_of_range_or_mistyped_numbers_are_400(rig: Rig, field: str, value: object) -> None:
    doc = refused(rig, 400, "POST", JOBS, {"payload": 1, field: value})
    assert doc["errors"][0]["pointer"] == f"/{field}"  # type: ignore[index]


@pytest.mark.parametrize(("field", "value"), [
    ("delay_seconds", 0), ("delay_seconds", 7 * 86400), ("priority", 0), ("priority", 9),
    ("max_attempts", 1), ("max_attempts", 100), ("lease_seconds", 1), ("lease_seconds", 43200),
])
def test_boundary_values_are_accepted(rig: Rig, field: str, value: int) -> None:
    code, _, _ = rig.call("POST", JOBS, {"payload": 1, field: value})
    assert code == 202


# -- batch -----------------------------------------------------------------------------------------

def test_one_invalid_job_fails_the_whole_batch_naming_its_index(rig: Rig) -> None:
    jobs: list[dict[str, object]] = [{"payload": i} for i in range(10)]
    jobs[7]["priority"] = 11
    doc = refused(rig, 400, "POST", BATCH, {"jobs": jobs})
    assert doc["errors"] == [{"pointer": "/jobs/7/priority", "detail": doc["errors"][0]["detail"],  # type: ignore[index]
                              "index": 7}]
    assert doc["detail"].startswith("job 7 ")  # type: ignore[union-attr]


@pytest.mark.parametrize("count", [0, 101])
def test_batch_size_outside_1_to_100_is_400(rig: Rig, count: int) -> None:
    refused(rig, 400, "POST", BATCH, {"jobs": [{"payload": 1}] * count})


def test_batch_with_unknown_top_level_field_is_400(rig: Rig) -> None:
    refused(rig, 400, "POST", BATCH, {"jobs": [{"payload": 1}], "queue": "x"})


# -- headers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["", " ", "k" * 129, "clé", "tab\tkey", " lead", "trail "])
def test_bad_idempotency_keys_are_400(rig: Rig, key: str) -> None:
    doc = refused(rig, 400, "POST", JOBS, {"payload": 1}, headers={"Idempotency-Key": key})
    assert doc["errors"][0]["pointer"] == "#/header/idempotency-key"  # type: ignore[index]


# -- Kafka unavailable -------------------------------------------------------------------------

def test_kafka_unavailable_is_503_with_retry_after_and_no_job_reported_accepted(rig: Rig) -> None:
    rig.log.fail = unavailable()
    code, headers, doc = rig.call("POST", JOBS, {"payload": 1})
    assert code == 503 and headers["retry-after"] == "1"
    assert headers["content-type"] == "application/problem+json"
    assert "job_id" not in doc
    # The status item written alongside the append was withdrawn: the job can never run.
    assert [rig.store.get_job(j).status.value for j in rig.store.items] == ["cancelled"]


def test_kafka_unavailable_for_a_batch_withdraws_every_job(rig: Rig) -> None:
    rig.log.fail = unavailable()
    code, _, _ = rig.call("POST", BATCH, {"jobs": [{"payload": i} for i in range(5)]})
    assert code == 503
    assert {rig.store.get_job(j).status.value for j in rig.store.items} == {"cancelled"}
    assert len(rig.store.items) == 5


def test_base64_flag_with_garbage_is_400(rig: Rig) -> None:
    event_body = "%%%not-base64%%%"
    code, _, _ = rig.call("POST", JOBS, raw=event_body, b64=False, content_type="application/json")
    assert code == 400
    code, _, _ = rig.call("POST", JOBS, raw=base64.b64encode(b"{}").decode() + "!!", b64=False)
    assert code == 400


@pytest.mark.parametrize("ctype", ["APPLICATION/JSON", "Application/Json; Charset=UTF-8",
                                   "application/json ;charset=\"utf-8\"", " application/json"])
def test_content_type_is_case_insensitive_as_media_types_are(rig: Rig, ctype: str) -> None:
    # The guard accepted these and Powertools, comparing case-sensitively, then raised: a 500.
    code, _, doc = rig.call("POST", JOBS, {"payload": 1}, content_type=ctype)
    assert code == 202, doc
    code, _, doc = rig.call("POST", BATCH, {"jobs": [{"payload": 2}]}, content_type=ctype)
    assert code == 202, doc
    assert [r.payload for r in rig.log.records] == [1, 2]
