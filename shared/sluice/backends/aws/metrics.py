"""Counts as CloudWatch EMF lines, for components that have no Powertools ``Metrics`` of their own,
and the no-op ``NullMetrics`` for those given none.

Light on purpose: the relay and the store both count through it, and importing it loads
neither boto3 nor Powertools (that happens on the first count).
"""

from __future__ import annotations


class EmfMetrics:
    """One CloudWatch EMF line per count, through Powertools (namespace "Sluice").

    ``single_metric`` flushes immediately, which suits rare events such as fenced
    refusals and needs no ``log_metrics`` decorator around the caller.
    """

    def __init__(self, namespace: str = "Sluice") -> None:
        self.namespace = namespace

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace=self.namespace) as metric:
            for key, dim in dimensions.items():
                metric.add_dimension(name=key, value=dim)


class NullMetrics:
    """Counts nothing: the default wherever no metrics sink is given (tests, tools)."""

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        return None
