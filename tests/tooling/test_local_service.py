"""The local stack's service running the fence middleware (``sluice_dev.local.service``), on a real
redis-server: what the demo's frozen worker calls (issue 31, item 7)."""

from __future__ import annotations

import json

import pytest
import urllib3

from sluice.core.bus import EventBus
from sluice.core.errors import StaleToken
from sluice.worker.runtime.http import FencedHttp
from sluice_dev.local.service import NAMESPACE, FencedService

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def test_the_service_lets_the_newest_holder_through_and_refuses_the_stale_one(
        redis_url: str, redis_client: object) -> None:
    with FencedService(redis_url) as service:
        url = service.url + "/ledger"
        new, old = FencedHttp("job-7", 2, EventBus()), FencedHttp("job-7", 1, EventBus())
        reply = json.loads(new.request("POST", url, json={"n": 1}, resource="ledger-notice").data)
        assert reply == {"accepted": True, "job_id": "job-7", "token": 2, "replay": False}
        with pytest.raises(StaleToken):
            old.request("POST", url, json={"n": 1}, resource="ledger-notice")
        assert json.loads(new.request("POST", url).data)["replay"] is True
        missing = urllib3.PoolManager().request("POST", url, body=b"{}", retries=False)
        assert missing.status == 400
        counts = urllib3.PoolManager().request("GET", service.url, retries=False)
        assert json.loads(counts.data) == {"accepted": 1, "replayed": 1}
    assert redis_client.get(f"sluice-fence:{NAMESPACE}:job-7") == "2"  # type: ignore[attr-defined]
