"""API Gateway (REST proxy) -> the Sluice enqueue gateway (sluice.gateway.http.app.Gateway)."""

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit

from sluice.gateway.http.app import gateway_from_settings

logger = Logger()
metrics = Metrics(namespace="Sluice")
gateway = gateway_from_settings()  # adapters (Kafka producer, clients) built once per container


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    response = gateway(event, context)
    metrics.add_metric(name=f"Gateway{response['statusCode'] // 100}xx", unit=MetricUnit.Count, value=1)
    return response
