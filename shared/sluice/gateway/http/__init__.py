"""The gateway's HTTP layer: strict body guard, wire models, problem documents,
the REST router (``sluice.gateway.http.app``, ``router``) and a local HTTP adapter.

Importing this package loads nothing heavy; only ``sluice.gateway.http.openapi`` (the OpenAPI
document, on its first request) imports Powertools' event handler.
"""
