"""Worker Lambda: drain the queues a dispatch event names, within the time left (sluice.entry.worker)."""

from sluice.entry.worker import handler as handler
from sluice.entry.worker import prepare

# At init, once per container: load the handlers module and refuse any handler whose timeout
# cannot fit this function's Timeout (HandlerDoesNotFit names it), rather than lease nothing.
prepare()
