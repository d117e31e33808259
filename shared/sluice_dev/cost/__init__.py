"""What Sluice costs to run, as code (issue 33, item 3).

``prices.toml`` holds every price with its source and the date it was read (``prices``: read and
checked); ``profiles`` says what each deploy profile creates; ``model`` computes a month line by
line for a workload, next to SQS + Lambda doing the same work; ``doc`` writes docs/cost.md's tables
from it (``make cost``); ``sluice cost`` (``sluice_dev.cli.cost``) prints one estimate. Tooling only:
never in the Lambda layer.
"""
