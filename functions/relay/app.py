"""Relay Lambda: every minute, Kafka records into the Redis queues (sluice.entry.relay)."""

from sluice.entry.relay import lambda_handler

handler = lambda_handler()  # at init, once per container
