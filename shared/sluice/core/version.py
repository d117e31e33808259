"""The version of Sluice, in one place: the package, the client's User-Agent and the OpenAPI document."""

__version__ = "0.1.0"
