"""OpenTelemetry spans of a job's path (issue 31, item 6), with the OpenTelemetry API only.

Imported by the composition root only where ``Settings.traces`` is on: without it no function
imports ``opentelemetry``. The exporter is the deployer's: the API hands the spans to whatever SDK
is installed as the global tracer provider (the ADOT Lambda layer in AWS, docs/deploy.md; a JSON
lines file under ``sluice dev --traces``); with none, the API records nothing.
"""
