"""Deprecated alias of ``sluice.entry.worker_function``: the Lambda handler path that teams'
copies of ``infra/worker.yaml`` name (``sluice.runtime.worker_function.handler``)."""

from sluice.entry.worker_function import handler

__all__ = ["handler"]
