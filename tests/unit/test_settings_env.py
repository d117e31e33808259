"""Settings from the environment: what pydantic-settings' BaseSettings did, without importing it.

``sluice.core.config`` dropped pydantic-settings for cold start (issue 14); these pin the behaviour
every deployed function relies on, so the swap changed nothing a template variable reaches.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sluice.core.config import Settings


def test_sluice_variables_fill_the_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_REDIS_URL", "redis://cache:6379/1")
    monkeypatch.setenv("SLUICE_KAFKA_PARTITIONS", "8")  # strings in lax mode: "8" is 8
    monkeypatch.setenv("SLUICE_DEFAULT_RATE_PER_S", "2.5")
    monkeypatch.setenv("SLUICE_KAFKA_SECURITY", "iam")
    monkeypatch.setenv("SLUICE_FUNCTION_TIMEOUT_S", "300")
    monkeypatch.setenv("SLUICE_JOB_ID_SECRET", "s" * 32)
    s = Settings.from_env()
    assert (s.redis_url, s.kafka_partitions, s.default_rate_per_s, s.kafka_security) == \
        ("redis://cache:6379/1", 8, 2.5, "iam")
    assert s.function_timeout_s == 300
    assert s.job_id_secret is not None and s.job_id_secret.get_secret_value() == "s" * 32


def test_names_match_in_any_case_and_other_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("sluice_kafka_topic", "lower.case")
    monkeypatch.setenv("SLUICE_NOT_A_FIELD", "x")
    monkeypatch.setenv("KAFKA_TOPIC", "unprefixed")
    s = Settings()
    assert s.kafka_topic == "lower.case"
    assert not hasattr(s, "not_a_field")


def test_keyword_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_JOBS_TABLE", "from-env")
    monkeypatch.setenv("SLUICE_RETENTION_DAYS", "3")
    s = Settings(jobs_table="from-code")
    assert (s.jobs_table, s.retention_days) == ("from-code", 3)


def test_a_bad_variable_is_a_validation_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_KAFKA_PARTITIONS", "0")
    with pytest.raises(ValidationError, match="kafka_partitions"):
        Settings()
    monkeypatch.setenv("SLUICE_KAFKA_PARTITIONS", "four")
    with pytest.raises(ValidationError, match="kafka_partitions"):
        Settings()
    monkeypatch.delenv("SLUICE_KAFKA_PARTITIONS")
    monkeypatch.setenv("SLUICE_KAFKA_SECURITY", "sasl")
    with pytest.raises(ValidationError, match="kafka_security"):
        Settings()


def test_settings_are_frozen_and_hashable() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.redis_url = "redis://elsewhere"  # type: ignore[misc]
    assert hash(s) == hash(Settings())  # wiring caches adapters per Settings


