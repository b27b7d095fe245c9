"""Retention settings: every ``job.*`` key is in ``conf/job.properties`` with the default the
code has, and a bad value is refused at start with the key's name."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.cli.settings import read_properties
from coordinator.stream.settings import CONF_DIR, JobSettings, load_settings


def test_every_job_setting_is_in_job_properties_with_its_default() -> None:
    listed = read_properties(CONF_DIR / "job.properties")
    defaults = JobSettings()
    for f in dataclasses.fields(JobSettings):
        key = "job." + f.name.replace("_", ".")
        if f.name in ("inbox", "checkpoint"):  # optional paths, below the warehouse by default
            continue
        assert key in listed, key
        assert type(f.default)(listed[key]) == getattr(defaults, f.name), key


def test_the_job_gets_the_retention_it_asks_for() -> None:
    settings = load_settings(
        [],
        {
            "job.retention.history.ms": "3600000",
            "job.offsets.delete.retention.ms": "60000",
            "job.retention.responses.ms": "1000",
            "job.clean.source": "delete",
        },
    )
    retention = settings.job.retention()
    assert retention.history_ms == 3_600_000 == retention.policy.min_compaction_lag_ms
    assert retention.policy.delete_retention_ms == 60_000
    assert retention.responses_ms == 1000
    assert retention.archive_dir is None, "no archive to clean when inbox files are deleted"
    assert load_settings().job.retention().archive_dir is not None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("job.retention.history.ms", "0", "job.retention.history.ms must be at least 1, got 0"),
        ("job.retention.responses.ms", "-5", "job.retention.responses.ms must be at least 1"),
        ("job.retention.archive.ms", "1d", "job.retention.archive.ms='1d': expected an integer"),
        (
            "job.offsets.min.cleanable.dirty.ratio",
            "1.5",
            "job.offsets.min.cleanable.dirty.ratio must be in (0, 1], got 1.5",
        ),
        ("job.offsets.cleaner.rows.per.run", "0", "job.offsets.cleaner.rows.per.run must be"),
        ("job.delta.log.retention.ms", "0", "job.delta.log.retention.ms must be at least 1"),
        ("job.retention.every.batches", "-1", "job.retention.every.batches must be >= 0"),
        ("job.vacuum.retention.hours", "-1", "job.vacuum.retention.hours must be >= 0"),
    ],
)
def test_a_bad_value_is_refused_with_its_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        load_settings([], {key: value})
    assert message in str(refused.value)
