"""The wait `destroy` runs before the EBS CSI driver goes (ray_llm_eks/domain/platform/teardown.py,
ray_llm_eks/adapters/teardown.py), against a
fake Kubernetes API and a fake clock."""

from __future__ import annotations

import pytest

from ray_llm_eks.adapters import teardown as waits
from ray_llm_eks.domain.platform import teardown


def pv(name: str, storage_class: str = "gp3", policy: str = "Delete", phase: str = "Released") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"storageClassName": storage_class, "persistentVolumeReclaimPolicy": policy},
        "status": {"phase": phase},
    }


class FakeApi:
    """Answers GET /api/v1/persistentvolumes with one list per call (the last one repeats)."""

    def __init__(self, *lists: list[dict]):
        self.lists, self.calls = list(lists), 0

    def get(self, path: str) -> dict:
        assert path == waits.PERSISTENT_VOLUMES
        items = self.lists[min(self.calls, len(self.lists) - 1)]
        self.calls += 1
        return {"kind": "PersistentVolumeList", "items": items}


class FakeClock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, seconds: float) -> None:
        if len(self.slept) > 1000:  # a wait that never gives up fails here instead of hanging the run
            raise AssertionError(f"still waiting after {self.now} s")
        self.slept.append(seconds)
        self.now += seconds


def test_only_the_classes_volumes_the_driver_deletes_count():
    listed = {
        "items": [
            pv("pvc-rocksdb"),
            pv("prometheus-data", policy="Retain"),  # the graph's own (PrometheusVolume): never goes by itself
            pv("other", storage_class="efs"),
            pv("pvc-failed", phase="Failed"),
        ]
    }
    assert teardown.volumes_to_reclaim(listed, "gp3") == ["pvc-failed (Failed)", "pvc-rocksdb (Released)"]
    assert teardown.volumes_to_reclaim({"items": []}, "gp3") == []


def test_wait_returns_once_the_driver_has_deleted_them():
    api, clock = FakeApi([pv("pvc-rocksdb", phase="Bound")], [pv("pvc-rocksdb")], []), FakeClock()
    waits.wait_until_reclaimed(
        api, "gp3", timeout_seconds=600, poll_seconds=10, sleep=clock.sleep, clock=lambda: clock.now
    )
    assert api.calls == 3 and clock.slept == [10, 10]


def test_wait_returns_at_once_when_nothing_is_left():
    api, clock = FakeApi([pv("prometheus-data", policy="Retain")]), FakeClock()
    waits.wait_until_reclaimed(api, "gp3", sleep=clock.sleep, clock=lambda: clock.now)
    assert api.calls == 1 and clock.slept == []


def test_wait_that_runs_out_names_what_is_left_and_stops_destroy():
    api, clock = FakeApi([pv("pvc-rocksdb")]), FakeClock()
    with pytest.raises(waits.VolumesNotReclaimed, match=r"after 600 s, 1 PersistentVolume\(s\) of StorageClass gp3"):
        waits.wait_until_reclaimed(
            api, "gp3", timeout_seconds=600, poll_seconds=45, sleep=clock.sleep, clock=lambda: clock.now
        )
    assert sum(clock.slept) == 600 and clock.slept[-1] == 600 - 13 * 45  # the last poll at the deadline


def test_timeouts_read_as_minutes():
    assert teardown.minutes("20m") == 20 and teardown.minutes("90s") == 1.5 and teardown.minutes("1h") == 60
    with pytest.raises(ValueError):
        teardown.minutes("20")
