"""scripts/kafka-broker's own choices, checked without starting a broker (tests/kafka starts one)."""
from __future__ import annotations

import base64

from tests.conftest import ROOT, load_file


def test_a_cluster_id_never_starts_with_a_dash_which_the_storage_tool_reads_as_an_option():
    # One base64url id in 64 starts with "-": 3,000 draws meet one with near certainty.
    cluster_id = load_file(ROOT / "scripts" / "kafka-broker", "kafka_broker_script").cluster_id
    ids = [cluster_id() for _ in range(3000)]
    assert not [text for text in ids if text.startswith("-")]
    assert {len(base64.urlsafe_b64decode(text + "==")) for text in ids} == {16}
    assert len(set(ids)) == len(ids)
