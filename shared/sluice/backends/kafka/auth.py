"""Connection settings shared by the producer, the relay's consumer and admin clients.

For MSK (template.yaml's default, ``KafkaSecurity=iam``), SASL/OAUTHBEARER over TLS with tokens
signed by ``aws-msk-iam-sasl-signer-python`` from the function's IAM role; ``tls`` for a
self-managed cluster with TLS and no client auth; plaintext for the local broker, or an explicit
opt-in (docs/security.md, "Records").
"""

from __future__ import annotations

from typing import Any

from sluice.core.config import Settings


def _token_provider_base() -> type[Any]:
    # kafka-python moved the ABC between releases; accept each location.
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:  # pragma: no cover - older kafka-python
        try:
            from kafka.sasl.oauth import AbstractTokenProvider
        except ImportError:
            from kafka.oauth.abstract import AbstractTokenProvider
    return AbstractTokenProvider  # type: ignore[no-any-return]


def msk_token_provider(region: str) -> Any:
    """A kafka-python token provider that signs an MSK IAM token on demand."""
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    base = _token_provider_base()

    class _MSKTokenProvider(base):  # type: ignore[misc, valid-type]
        def token(self) -> str:
            token, _expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
            return str(token)

    return _MSKTokenProvider()


def client_config(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for KafkaProducer, KafkaConsumer and KafkaAdminClient."""
    config: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in settings.kafka_bootstrap.split(",") if s.strip()],
        "client_id": "sluice",
    }
    if settings.kafka_security == "tls":  # TLS, the broker's certificate checked against the system CAs
        config |= {"security_protocol": "SSL"}
    elif settings.kafka_security == "iam":
        config |= {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": msk_token_provider(settings.aws_region),
        }
    return config
