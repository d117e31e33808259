"""Issue 18: ``crc32c`` is a dependency, and kafka-python really checks record CRCs with it.

kafka-python falls back to a pure-Python CRC-32C, about 4 times slower, when the C extension
does not import; nothing would fail, the relay would only be slower. So check the binding.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_kafka_python_checks_record_crcs_with_the_c_extension() -> None:
    import crc32c
    from kafka.record import util

    assert util.crc32c_c is crc32c.crc32c
    assert util._crc32c is crc32c.crc32c
    assert util.calc_crc32c.__defaults__ == (crc32c.crc32c,)  # bound when kafka-python loaded
    assert util.calc_crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_crc32c_is_a_required_dependency_of_the_package_and_the_layer() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # The runtime's extra (issue 31: the bare distribution is the client), which the layer mirrors.
    runtime = project["optional-dependencies"]["lambda"]
    assert any(d.replace(" ", "").startswith("crc32c") for d in runtime)
    assert not any(d.startswith("crc32c") for name, extra in project["optional-dependencies"].items()
                   if name != "lambda" for d in extra)
    layer = [line.split("==")[0] for line in (ROOT / "shared" / "requirements.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    assert "crc32c" in layer
    assert importlib.metadata.version("crc32c")
