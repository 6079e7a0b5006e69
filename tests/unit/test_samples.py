from corral.controller.overview import ClusterSummary, PoolUse, QueueStat
from corral.controller.samples import Samples, sample_of


def summary(at: float) -> ClusterSummary:
    pools = [PoolUse(pool=name, workers=1, capacity={"cpu": 8, "memory": 100, "gpu": 2},
                     used={"cpu": used, "memory": 10, "gpu": 1}) for name, used in (("a", 2), ("b", 3))]
    queue = [QueueStat(pool="a", jobs=2, tasks=5, oldest_seconds=9), QueueStat(pool="b", jobs=1, tasks=1,
                                                                              oldest_seconds=1)]
    return ClusterSummary(at=at, jobs={}, tasks={}, workers={}, pools=pools, queue=queue, per_worker=[])


def test_a_sample_sums_use_capacity_and_queue_over_the_pools():
    sample = sample_of(summary(5.0))
    assert sample.used == {"cpu": 5, "memory": 20, "gpu": 2}
    assert sample.capacity == {"cpu": 16, "memory": 200, "gpu": 4}
    assert (sample.at, sample.queued_jobs, sample.queued_tasks) == (5.0, 3, 6)


def test_only_the_window_is_kept_oldest_first():
    samples = Samples(window=60, every=10)
    for at in range(20):
        samples.add(sample_of(summary(float(at))))
    assert [s.at for s in samples.recent()] == [float(at) for at in range(13, 20)]
