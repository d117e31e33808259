"""The gateway's HTTP layer: strict body guard, wire models, problem documents,
the Powertools resolver (``sluice.gateway.http.app``) and a local HTTP adapter.

Importing this package loads nothing heavy; ``sluice.gateway.http.app`` imports Powertools.
"""
