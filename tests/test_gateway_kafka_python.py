"""kafka-python 3.0.12 against the gateway (interoperability): its KafkaConsumer and
KafkaAdminClient, with its own codec (never kio), through the scenarios of
tests/client_scenarios.py and its admin API."""

from __future__ import annotations

from typing import Any

import pytest

from tests import client_scenarios as sc
from tests.gateway_support import Running

CLIENT = "kafka-python"


@pytest.mark.slow
def test_group_forms_and_rebalances_on_join_leave_and_kill(running: Running):
    observed = sc.scenario_membership(CLIENT, running.port)
    # kafka-python exposes the generation (KafkaConsumer.group_metadata()).
    assert None not in observed["generations"], observed
    assert observed["leave_rebalance_s"] < 5, observed  # LeaveGroup, not a session timeout


@pytest.mark.slow
def test_commits_read_back_after_a_gateway_restart(tmp_path: Any):
    sc.scenario_commits_survive_restart(CLIENT, str(tmp_path / "wh"))


@pytest.mark.slow
def test_static_member_restarts_without_a_rebalance(running: Running):
    sc.scenario_static_restart(CLIENT, running.port)


@pytest.mark.slow
def test_admin_client_on_live_and_empty_group(running: Running):
    sc.kafka_python_admin_scenario(running.port, "kafka-python-admin")
