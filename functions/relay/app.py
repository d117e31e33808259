"""Relay Lambda: every minute, relay Kafka records into the Redis queues until shortly
before this invocation's timeout, then hand the partitions over to the next one."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from sluice.entry.relay import LambdaContextLike, run_scheduled

logger = Logger(service="sluice-relay")
copy_config_to_registered_loggers(source_logger=logger, include={"sluice"})


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContextLike) -> dict[str, Any]:
    return run_scheduled(event, context)
