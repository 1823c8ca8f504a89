"""Every metric the dashboards and alert rules query: the one list a test holds them to.

Names are as they appear in PromQL: counters with `_total`; histograms by their base name (queries use
`_bucket`, `_sum`, `_count`). A test checks every query uses only these; another (with the services running)
checks the services export them.
"""

from __future__ import annotations

DASHBOARD_METRICS: list[str] = [
    # fleet
    "fleetpilot_fleet_instances",  # gauge {state, gpu_model}
    "fleetpilot_spend_usd_per_hour",  # gauge
    "fleetpilot_budget_usd_per_hour",  # gauge: FLEETPILOT_BUDGET_USD_PER_H, exported beside the spend
    "fleetpilot_fleet_transitions_total",  # counter {to_state}: drains annotated from it
    # fleet, one series per non-gone instance {instance_id, gpu_model}: the instance table
    "fleetpilot_fleet_instance_state_since_timestamp_seconds",  # gauge {instance_id, state, gpu_model}
    "fleetpilot_fleet_instance_price_usd_per_hour",  # gauge
    "fleetpilot_fleet_instance_storage_usd_per_hour",  # gauge
    "fleetpilot_fleet_instance_throughput_tasks_per_hour",  # gauge
    # demand
    "fleetpilot_demand_arrival_rate_per_hour",  # gauge {window}
    "fleetpilot_demand_backlog_worker_hours",  # gauge
    "fleetpilot_demand_task_events_total",  # counter {kind}
    "fleetpilot_demand_pending_tasks",  # gauge
    "fleetpilot_demand_running_tasks",  # gauge
    "fleetpilot_demand_task_wait_seconds",  # histogram: submitted to started, per task
    "fleetpilot_demand_state",  # gauge {state}: 1 for the current demand state
    # bench
    "fleetpilot_bench_results_total",  # counter {kind, verdict}
    "fleetpilot_bench_reports_missing_total",  # counter: bench requests past their deadline without a report
    "fleetpilot_bench_pending_requests",  # gauge
    # provisioner
    "fleetpilot_provisioner_launches_refused_total",  # counter {rule}
    "fleetpilot_provisioner_instances_launched_total",  # counter {how}: launches annotated from it
    "fleetpilot_provisioner_bandwidth_usd_total",  # counter: rents' image pulls at the hosts' bandwidth price
    # decider, agent, guardrails
    "fleetpilot_decider_runs_total",  # counter {trigger, outcome}
    "fleetpilot_decider_run_duration_seconds",  # histogram
    "fleetpilot_agent_prompt_tokens",  # gauge: the last run's prompt
    "fleetpilot_guardrail_refusals_total",  # counter {rule}
    # every service (shared/metrics.py)
    "fleetpilot_dead_letters_total",  # counter {service, reason}
    "fleetpilot_duplicate_events_total",  # counter {service}
    "fleetpilot_consumer_pending_messages",  # gauge {stream, consumer} (shared/consumer_lag.py)
    # provisioner: the vast.ai API
    "fleetpilot_vast_api_calls_total",  # counter {endpoint, outcome}
    "fleetpilot_vast_rate_limited_total",  # counter {endpoint}
    "fleetpilot_vast_api_latency_seconds",  # histogram {endpoint}
    # FastStream's Prometheus middleware (shared/bus.py, metrics_prefix="fleetpilot_bus")
    "fleetpilot_bus_received_processed_messages_total",  # counter {app_name, handler, status}
    "fleetpilot_bus_received_processed_messages_duration_seconds",  # histogram {app_name, handler}
]

# Metrics only the alert rules read (deploy/prometheus/alerts.yml)
ALERT_METRICS: list[str] = [
    "fleetpilot_vast_auth_ok",  # gauge: 1 while vast.ai accepts the key, 0 after a 401/403
    "fleetpilot_provisioner_reconciliations_total",  # counter {outcome}: ok, or failed (vast.ai not listed)
    "fleetpilot_vast_foreign_instances",  # gauge: instances on the account without FleetPilot's label
    "fleetpilot_agent_degraded",  # gauge: 1 while the last agent run was degraded
    "fleetpilot_decider_lock_backend_up",  # gauge: 0 while the decider cannot reach Redis
    "fleetpilot_decider_alerts_total",  # counter {kind}: e.g. command_publish_failed (FP_COMMANDS full)
    "fleetpilot_provisioner_commands_expired_total",  # counter {verb}: taken after their expires_at
    "fleetpilot_provisioner_second_rents_destroyed_total",  # counter: a launch slot's second instance destroyed
]

HISTOGRAMS: frozenset[str] = frozenset(
    {
        "fleetpilot_decider_run_duration_seconds",
        "fleetpilot_demand_task_wait_seconds",
        "fleetpilot_vast_api_latency_seconds",
        "fleetpilot_bus_received_processed_messages_duration_seconds",
    }
)

# The metrics the operations issue requires the services to export; each must be on a dashboard.
REQUIRED_METRICS: list[str] = [
    "fleetpilot_fleet_instances",
    "fleetpilot_spend_usd_per_hour",
    "fleetpilot_demand_arrival_rate_per_hour",
    "fleetpilot_demand_backlog_worker_hours",
    "fleetpilot_decider_runs_total",
    "fleetpilot_decider_run_duration_seconds",
    "fleetpilot_agent_prompt_tokens",
    "fleetpilot_guardrail_refusals_total",
    "fleetpilot_dead_letters_total",
    "fleetpilot_vast_api_calls_total",
    "fleetpilot_vast_rate_limited_total",
    "fleetpilot_vast_api_latency_seconds",
]
