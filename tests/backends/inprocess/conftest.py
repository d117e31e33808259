"""The in-process moto tests (``mock_aws``) run on the same moto as the local moto server: its
speed-ups (``sluice_dev.local.motoddb``, ``motoexpr``, ``mototime``, ``motoevents``, each shown to
answer as moto's own code does by its test here) are installed in this process once."""

from __future__ import annotations

from sluice_dev.local import motoddb, motoevents, motoexpr, mototime

motoddb.install()
motoexpr.install()
mototime.install()
motoevents.install()
