"""Completion events: one EventBridge event per final state a job reaches (docs/events.md).

``model`` turns a jobs-table stream record into the event (pure); ``publish`` sends a batch
of them (ports and the EventBridge adapter). ``functions/events/app.py`` is the Lambda on the
jobs table's stream; ``sluice dev`` polls moto's stream and calls the same ``Publisher``.
"""
